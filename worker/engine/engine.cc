#include "worker/engine/engine.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/kv_page_pool.h"
#include "worker/engine/state_slot_pool.h"

namespace walsh {

Engine::~Engine() {
  // Followers end their loop; a broken group has nobody to tell.
  if (group_.spans_processes() && !group_.broken()) {
    (void)Mirror({.kind = RankCommand::Kind::kStop});
  }
}

absl::Status Engine::Mirror(const RankCommand& command) {
  if (!group_.spans_processes()) return absl::OkStatus();
  return SendRankCommand(*group_.communicator(), command, options_.collective_timeout);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Model> model,
                                                       const EngineOptions& options,
                                                       const EngineFaults& faults,
                                                       ProcessGroup process_group) {
  if (process_group.comm != nullptr && process_group.rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", process_group.rank, " follows its group's leader (RankFollower), not an engine"));
  }
  if (options.threads < 1 || options.threads > 1024) {
    return absl::InvalidArgumentError("engine threads must be 1..1024");
  }
  const bool kv_quantized =
      options.kv_cache_dtype == KvCacheDtype::kQ8 || options.kv_cache_dtype == KvCacheDtype::kQ4;
  if (kv_quantized && model->config().key_length % kKvGroup != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-cache-dtype ", KvCacheDtypeName(options.kv_cache_dtype),
                     " quantizes 32 values of a head at a time; this model's head width (",
                     model->config().key_length, ") is not a multiple of 32"));
  }
  ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Build(model->file(), options.tp));
  ASSIGN_OR_RETURN(BackendGroup group,
                   MakeBackendGroup(*model, options, faults, std::move(process_group)));
  std::unique_ptr<Engine> engine(new Engine(std::move(model), options, std::move(group)));
  engine->plan_ = std::make_unique<ShardPlan>(std::move(plan));
  for (int r = 0; r < engine->group_.size(); ++r) {
    engine->graphs_.push_back(std::make_unique<Qwen35Graph>(
        *engine->model_, engine->group_.backend(r), options.quantize_activations, *engine->plan_,
        engine->group_.first_rank() + r, engine->group_.communicator(),
        options.collective_timeout));
  }
  engine->kv_dtype_ = !options.quantize_activations && options.kv_cache_dtype == KvCacheDtype::kFp16
                          ? KvCacheDtype::kF32
                          : options.kv_cache_dtype;
  return engine;
}

Engine::Engine(std::unique_ptr<Model> model, const EngineOptions& options, BackendGroup group)
    : model_(std::move(model)),
      options_(options),
      group_(std::move(group)),
      max_context_(options.max_context > 0
                       ? std::min(options.max_context, model_->config().context_length)
                       : model_->config().context_length) {}

int64_t Engine::CacheRoom() const {
  // Every rank allocates its share of the same pages and slots: the tightest rank decides.
  int64_t room = INT64_MAX;
  for (int r = 0; r < group_.size(); ++r) {
    room = std::min(room, group_.backend(r).cache_bytes_available());
  }
  return room;
}

CacheUnits Engine::CacheUnitsFor(int64_t page_size) const {
  // Counted at TP = 1, from the same geometry each rank allocates its share of.
  const Qwen35Config& c = model_->config();
  const CacheGeometry whole = Qwen35Graph::GeometryOf(*model_, c.head_count_kv, c.ssm_group_count,
                                                      c.ssm_time_step_rank, 0, page_size, 0);
  return {.page_bytes = KvPagePool::PageBytes(whole.page_size, whole.attention_layers,
                                              KvBytes(kv_dtype_, whole.kv_dim)),
          .slot_bytes =
              StateSlotPool::SlotBytes(whole.gdn_layers, whole.conv_floats, whole.recurrent_floats),
          .uses_kv = model_->attention_layers() > 0};
}

absl::Status Engine::AllocateCaches(const CachePlan& plan, int64_t page_size) {
  if (page_size_ != 0) return absl::FailedPreconditionError("the caches are allocated already");
  if (page_size < 1) return absl::InvalidArgumentError("KV page size must be >= 1");
  const int64_t slots = plan.slots + plan.snapshot_slots;
  RETURN_IF_ERROR(Mirror({.kind = RankCommand::Kind::kAllocateCaches,
                          .pages = plan.pages,
                          .page_size = page_size,
                          .slots = slots,
                          .kv_dtype = kv_dtype_}));
  for (int r = 0; r < group_.size(); ++r) {
    CacheGeometry g = graphs_[r]->Geometry(plan.pages, page_size, slots);
    g.kv_dtype = kv_dtype_;
    RETURN_IF_ERROR(group_.backend(r).AllocateCaches(g));
  }
  caches_ = plan;
  page_size_ = page_size;
  return absl::OkStatus();
}

BackendMemory Engine::Memory() const {
  BackendMemory total;
  for (int r = 0; r < group_.size(); ++r) {
    const BackendMemory m = group_.backend(r).Memory();
    total.device_used += m.device_used;
    total.device_total += m.device_total;
    total.weights += m.weights;
    total.kv_cache += m.kv_cache;
    total.state += m.state;
  }
  return total;
}

absl::Status Engine::ForEachRank(const std::function<absl::Status(Backend&)>& op) {
  for (int r = 0; r < group_.size(); ++r) RETURN_IF_ERROR(op(group_.backend(r)));
  return absl::OkStatus();
}

absl::Status Engine::Copy(const CacheCopy& c) {
  RETURN_IF_ERROR(Mirror({.kind = RankCommand::Kind::kCopy, .copy = c}));
  return ForEachRank([&](Backend& b) -> absl::Status {
    if (c.from_slot < 0) return b.ClearStateSlot(c.to_slot);
    RETURN_IF_ERROR(b.CopyStateSlot(c.from_slot, c.to_slot));
    return c.from_page >= 0 ? b.CopyKvPage(c.from_page, c.to_page) : absl::OkStatus();
  });
}

absl::Status Engine::CheckImageInputs(const SequenceInput& in) const {
  if (in.rope_positions.empty() && in.embedding_of_token.empty()) return absl::OkStatus();
  for (int r = 0; r < group_.size(); ++r) {
    if (!group_.backend(r).takes_image_inputs()) {
      return absl::FailedPreconditionError(
          absl::StrCat("sequence ", in.id, " brings image inputs, which the ",
                       group_.backend(r).name(), " backend does not take (the CPU backend does)"));
    }
  }
  const size_t n = in.tokens.size();
  const int64_t width = model_->config().embedding_length;
  if (!in.rope_positions.empty() && in.rope_positions.size() != 3 * n) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", in.id, " brings ",
                                                   in.rope_positions.size(), " rope positions for ",
                                                   n, " tokens; it needs 3 per token or none"));
  }
  for (int32_t p : in.rope_positions) {
    if (p < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", in.id, " brings a negative rope position ", p));
    }
  }
  if (!in.embedding_of_token.empty() && in.embedding_of_token.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", in.id, " brings ", in.embedding_of_token.size(),
                     " embedding indices for ", n, " tokens; it needs one per token or none"));
  }
  if (in.embeddings.size() % width != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", in.id, " brings ",
                                                   in.embeddings.size(),
                                                   " embedding floats, not rows of ", width));
  }
  const int64_t rows = static_cast<int64_t>(in.embeddings.size()) / width;
  for (int32_t row : in.embedding_of_token) {
    if (row < -1 || row >= rows) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", in.id, " names embedding row ",
                                                     row, " of ", rows, " (-1: none)"));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::CheckStep(const std::vector<SequenceInput>& batch,
                               absl::Span<const int64_t> lengths) const {
  const Qwen35Config& c = model_->config();
  if (lengths.size() != batch.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch of ", batch.size(), " sequences with ", lengths.size(), " lengths"));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& in = batch[i];
    if (in.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", in.id, " brings no tokens"));
    }
    RETURN_IF_ERROR(CheckImageInputs(in));
    for (size_t j = 0; j < in.tokens.size(); ++j) {
      // A negative id is an image token's cache key (image_prompt.h): only where a row replaces
      // its embedding.
      const int32_t tok = in.tokens[j];
      const bool replaced = !in.embedding_of_token.empty() && in.embedding_of_token[j] >= 0;
      if ((tok < 0 && !replaced) || tok >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", tok, " is outside [0, ", c.vocab_size, ")"));
      }
    }
    const int64_t new_len = lengths[i] + static_cast<int64_t>(in.tokens.size());
    if (new_len > max_context_) {
      return absl::OutOfRangeError(absl::StrCat("sequence ", in.id, " would reach ", new_len,
                                                " tokens; the context limit is ", max_context_));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::CheckCaches(const std::vector<SequenceInput>& batch,
                                 const std::vector<SequenceCache>& caches) const {
  if (page_size_ == 0) return absl::FailedPreconditionError("the caches are not allocated");
  if (caches.size() != batch.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch of ", batch.size(), " sequences with memory for ", caches.size()));
  }
  const bool uses_kv = model_->attention_layers() > 0;
  const int64_t slots = caches_.slots + caches_.snapshot_slots;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& in = batch[i];
    const SequenceCache& m = caches[i];
    const int64_t new_len = m.length + static_cast<int64_t>(in.tokens.size());
    const auto out_of = [](int64_t v, int64_t n) { return v < 0 || v >= n; };
    bool bad = m.length < 0 || out_of(m.slot, slots);
    if (uses_kv && static_cast<int64_t>(m.pages.size()) * page_size_ < new_len) bad = true;
    for (int32_t page : m.pages) bad = bad || out_of(page, caches_.pages);
    for (int32_t plane : m.planes) bad = bad || out_of(plane, slots);
    if (in.keep_states ? m.planes.size() + 1 != in.tokens.size() : !m.planes.empty()) bad = true;
    if (bad) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", in.id, "'s memory does not hold its step (length ", m.length,
                       ", ", in.tokens.size(), " tokens, slot ", m.slot, ", ", m.pages.size(),
                       " pages, ", m.planes.size(), " planes)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> Engine::Forward(const std::vector<SequenceInput>& batch,
                                              const std::vector<SequenceCache>& caches) {
  const Qwen35Config& c = model_->config();
  RETURN_IF_ERROR(CheckCaches(batch, caches));
  std::vector<int64_t> lengths;
  for (const SequenceCache& m : caches) lengths.push_back(m.length);
  RETURN_IF_ERROR(CheckStep(batch, lengths));

  // Flatten: each sequence's tokens in order.
  StepPlan plan;
  ForwardResult result;
  result.vocab = c.vocab_size;
  const bool speculative = std::any_of(batch.begin(), batch.end(),
                                       [](const SequenceInput& in) { return in.keep_states; });
  const bool images = std::any_of(batch.begin(), batch.end(), [](const SequenceInput& in) {
    return !in.rope_positions.empty() || !in.embedding_of_token.empty();
  });
  auto rows = std::make_shared<std::vector<float>>();
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceCache& sq = caches[i];
    const SequenceInput& in = batch[i];
    const int64_t first_row = static_cast<int64_t>(rows->size()) / c.embedding_length;
    if (images) rows->insert(rows->end(), in.embeddings.begin(), in.embeddings.end());
    plan.seq_slots.push_back(sq.slot);
    plan.seq_pages.emplace_back(sq.pages.begin(), sq.pages.end());
    for (size_t j = 0; j < batch[i].tokens.size(); ++j) {
      const int64_t pos = sq.length + static_cast<int64_t>(j);
      if (images) {
        for (int s = 0; s < 3; ++s) {
          plan.rope_of_token.push_back(in.rope_positions.empty() ? static_cast<int32_t>(pos)
                                                                 : in.rope_positions[3 * j + s]);
        }
        const int32_t row = in.embedding_of_token.empty() ? -1 : in.embedding_of_token[j];
        plan.embedding_of_token.push_back(row < 0 ? -1 : static_cast<int32_t>(first_row + row));
      }
      if (batch[i].all_logits || j + 1 == batch[i].tokens.size()) {
        plan.logit_tokens.push_back(static_cast<int32_t>(plan.tokens.size()));
        result.rows.push_back({batch[i].id, pos});
      }
      plan.seq_of_token.push_back(static_cast<int32_t>(i));
      plan.pos_of_token.push_back(static_cast<int32_t>(pos));
      plan.tokens.push_back(batch[i].tokens[j]);
      if (speculative) {
        plan.plane_of_token.push_back(batch[i].keep_states && j < sq.planes.size() ? sq.planes[j]
                                                                                   : -1);
      }
    }
  }
  if (images) plan.embedding_rows = std::move(rows);
  absl::Status run = Mirror({.kind = RankCommand::Kind::kStep, .plan = plan});
  if (run.ok()) run = group_.Run([&](int r) { return graphs_[r]->Run(plan, &result.logits); });
  if (!run.ok()) {
    // Layers before the failure have advanced their state, so this is never a "nothing
    // changed" RESOURCE_EXHAUSTED (only a reservation says that), whatever the cause; a lost
    // tensor-parallel rank keeps its DEADLINE_EXCEEDED.
    if (run.code() == absl::StatusCode::kDeadlineExceeded) return run;
    if (group_.broken()) {
      return absl::UnavailableError(absl::StrCat("tensor-parallel group lost: ", run.message()));
    }
    return absl::InternalError(absl::StrCat("forward step failed: ", run.message()));
  }
  return result;
}

}  // namespace walsh
