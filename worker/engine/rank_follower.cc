#include "worker/engine/rank_follower.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace walsh {
namespace {

// An idle leader sends nothing for as long as nobody asks it for tokens; a year stands for
// "no deadline" (gloo takes a finite one).
constexpr std::chrono::milliseconds kIdleWait = std::chrono::hours(24 * 365);

}  // namespace

absl::StatusOr<std::unique_ptr<RankFollower>> RankFollower::Create(std::unique_ptr<Model> model,
                                                                   const EngineOptions& options,
                                                                   ProcessGroup group) {
  if (group.comm == nullptr || group.rank == 0) {
    return absl::InvalidArgumentError("a follower holds a rank other than 0 of a process group");
  }
  const int rank = group.rank;
  ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Build(model->file(), options.tp));
  ASSIGN_OR_RETURN(BackendGroup backends,
                   MakeBackendGroup(*model, options, EngineFaults{}, std::move(group)));
  std::unique_ptr<RankFollower> f(new RankFollower(std::move(model), options, std::move(backends)));
  f->plan_ = std::make_unique<ShardPlan>(std::move(plan));
  f->graph_ = std::make_unique<Qwen35Graph>(*f->model_, f->group_.backend(0),
                                            options.quantize_activations, *f->plan_, rank,
                                            f->group_.communicator(), options.collective_timeout);
  return f;
}

RankFollower::RankFollower(std::unique_ptr<Model> model, const EngineOptions& options,
                           BackendGroup group)
    : model_(std::move(model)), options_(options), group_(std::move(group)) {}

absl::Status RankFollower::Serve() {
  for (;;) {
    absl::StatusOr<RankCommand> command =
        ReceiveRankCommand(*group_.communicator(), rank(), kIdleWait);
    absl::Status s = command.ok() ? Carry(*command) : command.status();
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("rank ", rank(), ": ", s.message()));
    if (command->kind == RankCommand::Kind::kStop) return absl::OkStatus();
  }
}

absl::Status RankFollower::CheckSlot(int32_t slot) const {
  if (slot < 0 || slot >= slots_) {
    return absl::DataLossError(absl::StrCat("the leader named state slot ", slot, " of ", slots_));
  }
  return absl::OkStatus();
}

absl::Status RankFollower::CheckPage(int32_t page) const {
  if (page < 0 || page >= pages_) {
    return absl::DataLossError(absl::StrCat("the leader named KV page ", page, " of ", pages_));
  }
  return absl::OkStatus();
}

absl::Status RankFollower::CheckTokens(const StepPlan& plan) const {
  const Qwen35Config& c = model_->config();
  const int64_t rows = plan.embedding_rows == nullptr
                           ? 0
                           : static_cast<int64_t>(plan.embedding_rows->size()) / c.embedding_length;
  const bool uses_kv = model_->attention_layers() > 0;
  for (size_t t = 0; t < plan.tokens.size(); ++t) {
    const int32_t row = plan.embedding_of_token.empty() ? -1 : plan.embedding_of_token[t];
    if (row >= rows || (row < 0 && (plan.tokens[t] < 0 || plan.tokens[t] >= c.vocab_size))) {
      return absl::DataLossError(absl::StrCat("the leader sent token ", plan.tokens[t],
                                              " with embedding row ", row, " of ", rows));
    }
    const int32_t pos = plan.pos_of_token[t];
    const auto& pages = plan.seq_pages[plan.seq_of_token[t]];
    if (pos < 0 || (uses_kv && pos >= static_cast<int64_t>(pages.size()) * page_size_)) {
      return absl::DataLossError(
          absl::StrCat("the leader sent position ", pos, " past its sequence's pages"));
    }
  }
  for (int32_t p : plan.rope_of_token) {
    if (p < 0) return absl::DataLossError("the leader sent a negative rope position");
  }
  // As the engine lays a step out: each sequence's tokens together, sequence after sequence,
  // every sequence in its own slot, and no plane on a slot the step reads.
  for (size_t t = 0; t < plan.seq_of_token.size(); ++t) {
    const int32_t s = plan.seq_of_token[t], before = t == 0 ? 0 : plan.seq_of_token[t - 1];
    if (s != before && s != before + 1) {
      return absl::DataLossError("the leader sent a step whose sequences' tokens are not in order");
    }
  }
  const size_t sequences = plan.seq_slots.size();
  if (!plan.seq_of_token.empty() &&
      static_cast<size_t>(plan.seq_of_token.back()) + 1 != sequences) {
    return absl::DataLossError("the leader sent a step with a sequence of no tokens");
  }
  absl::flat_hash_set<int32_t> live(plan.seq_slots.begin(), plan.seq_slots.end());
  if (live.size() != sequences) {
    return absl::DataLossError("the leader sent two sequences in one state slot");
  }
  for (int32_t plane : plan.plane_of_token) {
    if (live.contains(plane)) {
      return absl::DataLossError(
          absl::StrCat("the leader sent state plane ", plane, ", a slot the step reads"));
    }
  }
  return absl::OkStatus();
}

absl::Status RankFollower::Carry(const RankCommand& c) {
  Backend& backend = group_.backend(0);
  if (c.kind != RankCommand::Kind::kAllocateCaches && pages_ < 0) {
    return absl::FailedPreconditionError("the leader sent work before the caches' sizes");
  }
  switch (c.kind) {
    case RankCommand::Kind::kAllocateCaches: {
      if (pages_ >= 0) return absl::FailedPreconditionError("the caches are allocated already");
      CacheGeometry g = graph_->Geometry(c.pages, c.page_size, c.slots);
      g.kv_dtype = c.kv_dtype;
      const bool kv_quantized = c.kv_dtype == KvCacheDtype::kQ8 || c.kv_dtype == KvCacheDtype::kQ4;
      if (kv_quantized && model_->config().key_length % kKvGroup != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("the leader asked for ", KvCacheDtypeName(c.kv_dtype),
                         " KV pages, which this model's "
                         "head width (",
                         model_->config().key_length, ") cannot hold"));
      }
      // The sizes the backend will multiply out, checked for overflow (and kept under 16 TiB).
      int64_t kv_bytes = 0, state_bytes = 0;
      constexpr int64_t kLimit = int64_t{1} << 44;
      if (__builtin_mul_overflow(g.page_bytes(), g.pages, &kv_bytes) ||
          __builtin_mul_overflow(g.slot_floats() * int64_t{4}, g.slots, &state_bytes) ||
          kv_bytes > kLimit || state_bytes > kLimit) {
        return absl::DataLossError(absl::StrCat("the leader asked for ", c.pages, " pages of ",
                                                c.page_size, " positions and ", c.slots,
                                                " state slots: more than any cache holds"));
      }
      RETURN_IF_ERROR(backend.AllocateCaches(g));
      pages_ = c.pages;
      page_size_ = c.page_size;
      slots_ = c.slots;
      return absl::OkStatus();
    }
    case RankCommand::Kind::kCopy: {
      const CacheCopy& copy = c.copy;
      RETURN_IF_ERROR(CheckSlot(copy.to_slot));
      if (copy.from_slot < 0) return backend.ClearStateSlot(copy.to_slot);
      RETURN_IF_ERROR(CheckSlot(copy.from_slot));
      RETURN_IF_ERROR(backend.CopyStateSlot(copy.from_slot, copy.to_slot));
      if (copy.from_page < 0) return absl::OkStatus();
      RETURN_IF_ERROR(CheckPage(copy.from_page));
      RETURN_IF_ERROR(CheckPage(copy.to_page));
      return backend.CopyKvPage(copy.from_page, copy.to_page);
    }
    case RankCommand::Kind::kStep: {
      const StepPlan& plan = c.plan;
      for (int32_t slot : plan.seq_slots) RETURN_IF_ERROR(CheckSlot(slot));
      for (const std::vector<int32_t>& pages : plan.seq_pages) {
        for (int32_t page : pages) RETURN_IF_ERROR(CheckPage(page));
      }
      for (int32_t plane : plan.plane_of_token) {
        if (plane >= 0) RETURN_IF_ERROR(CheckSlot(plane));
      }
      RETURN_IF_ERROR(CheckTokens(plan));
      std::vector<float> unused;  // only rank 0 reads logits back
      RETURN_IF_ERROR(graph_->Run(plan, &unused));
      steps_.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    case RankCommand::Kind::kStop:
      return absl::OkStatus();
  }
  return absl::InternalError("unknown rank command");
}

}  // namespace walsh
