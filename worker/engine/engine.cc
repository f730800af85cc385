#include "worker/engine/engine.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/backend_factory.h"

namespace walsh {

Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Model> model,
                                                       const EngineOptions& options) {
  const Qwen35Config& c = model->config();
  if (options.threads < 1 || options.threads > 1024) {
    return absl::InvalidArgumentError("engine threads must be 1..1024");
  }
  if (options.page_size < 1) return absl::InvalidArgumentError("KV page size must be >= 1");
  if (options.tp < 1 || options.tp > 64) return absl::InvalidArgumentError("tp must be 1..64");
  if (options.isa && !CpuSupports(*options.isa)) {
    return absl::InvalidArgumentError(
        absl::StrCat("this CPU does not support the ", CpuIsaName(*options.isa), " kernels"));
  }
  const CpuIsa isa = options.isa.value_or(BestCpuIsa());
  CacheGeometry g;
  g.page_size = options.page_size;
  g.attention_layers = std::max<int64_t>(model->attention_layers(), 1);
  g.kv_dim = c.head_count_kv * c.key_length;
  g.gdn_layers = std::max<int64_t>(model->gdn_layers(), 1);
  g.conv_floats = (c.ssm_conv_kernel - 1) * c.gdn_conv_dim();
  g.recurrent_floats = c.ssm_time_step_rank * c.ssm_state_size * c.ssm_state_size;
  const int64_t page_bytes = KvPagePool::PageBytes(g.page_size, g.attention_layers, g.kv_dim);
  const int64_t slot_bytes =
      StateSlotPool::SlotBytes(g.gdn_layers, g.conv_floats, g.recurrent_floats);
  g.pages = options.kv_pages > 0 ? options.kv_pages : options.kv_cache_bytes / page_bytes;
  g.slots = options.state_slots > 0 ? options.state_slots : options.state_bytes / slot_bytes;

  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(*model, options, isa));
  // A device with less room than the budgets asks for keeps the state slots and cuts the pages.
  const int64_t room = backend->cache_bytes_available();
  if (g.slots * slot_bytes + g.pages * page_bytes > room) {
    g.pages = std::max<int64_t>(0, (room - g.slots * slot_bytes) / page_bytes);
  }
  if (g.pages < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache budget of ", options.kv_cache_bytes, " bytes holds no page (a page is ",
        page_bytes, " bytes",
        room < INT64_MAX ? absl::StrCat("; the device has ", room, " bytes for caches") : "", ")"));
  }
  if (g.slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat("state budget of ", options.state_bytes,
                                                   " bytes holds no slot (a slot is ", slot_bytes,
                                                   " bytes)"));
  }
  RETURN_IF_ERROR(backend->AllocateCaches(g));
  return std::unique_ptr<Engine>(new Engine(std::move(model), options, isa, std::move(backend), g));
}

Engine::Engine(std::unique_ptr<Model> model, const EngineOptions& options, CpuIsa isa,
               std::unique_ptr<Backend> backend, const CacheGeometry& geometry)
    : model_(std::move(model)),
      options_(options),
      isa_(isa),
      max_context_(options.max_context > 0
                       ? std::min(options.max_context, model_->config().context_length)
                       : model_->config().context_length),
      kv_(geometry.pages, geometry.page_size),
      states_(geometry.slots),
      backend_(std::move(backend)),
      graph_(std::make_unique<Qwen35Graph>(*model_, *backend_, options.quantize_activations)) {}

absl::StatusOr<SequenceId> Engine::AddSequence() {
  ASSIGN_OR_RETURN(int32_t slot, states_.Allocate());
  if (absl::Status s = backend_->ClearStateSlot(slot); !s.ok()) {
    states_.Release(slot);
    return s;
  }
  const SequenceId id = next_id_++;
  sequences_[id].slot = slot;
  return id;
}

absl::Status Engine::RemoveSequence(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  kv_.Release(it->second.pages);
  states_.Release(it->second.slot);
  sequences_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Engine::SequenceLength(SequenceId id) const {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  return it->second.length;
}

EngineStats Engine::Stats() const {
  return {kv_.used(), kv_.total(), states_.used(), states_.total()};
}

absl::StatusOr<ForwardResult> Engine::Forward(const std::vector<SequenceInput>& batch) {
  const Qwen35Config& c = model_->config();
  // Validate everything before touching any state.
  std::vector<Sequence*> seqs;
  absl::flat_hash_set<SequenceId> seen;
  int64_t pages_needed = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& in = batch[i];
    auto it = sequences_.find(in.id);
    if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", in.id));
    if (!seen.insert(in.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", in.id, " appears twice in a batch"));
    }
    if (in.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", in.id, " brings no tokens"));
    }
    for (int32_t tok : in.tokens) {
      if (tok < 0 || tok >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", tok, " is outside [0, ", c.vocab_size, ")"));
      }
    }
    Sequence& sq = it->second;
    const int64_t new_len = sq.length + static_cast<int64_t>(in.tokens.size());
    if (new_len > max_context_) {
      return absl::OutOfRangeError(absl::StrCat("sequence ", in.id, " would reach ", new_len,
                                                " tokens; the context limit is ", max_context_));
    }
    const int64_t pages = (new_len + kv_.page_size() - 1) / kv_.page_size();
    pages_needed += std::max<int64_t>(0, pages - static_cast<int64_t>(sq.pages.size()));
    seqs.push_back(&sq);
  }
  if (model_->attention_layers() > 0) {
    ASSIGN_OR_RETURN(std::vector<int32_t> fresh, kv_.Allocate(pages_needed));
    size_t next = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const int64_t new_len = seqs[i]->length + static_cast<int64_t>(batch[i].tokens.size());
      while (static_cast<int64_t>(seqs[i]->pages.size()) * kv_.page_size() < new_len) {
        seqs[i]->pages.push_back(fresh[next++]);
      }
    }
  }

  // Flatten: each sequence's tokens in order.
  StepPlan plan;
  ForwardResult result;
  result.vocab = c.vocab_size;
  for (size_t i = 0; i < batch.size(); ++i) {
    plan.seq_slots.push_back(seqs[i]->slot);
    plan.seq_pages.push_back(seqs[i]->pages);
    for (size_t j = 0; j < batch[i].tokens.size(); ++j) {
      const int64_t pos = seqs[i]->length + static_cast<int64_t>(j);
      if (batch[i].all_logits || j + 1 == batch[i].tokens.size()) {
        plan.logit_tokens.push_back(static_cast<int32_t>(plan.tokens.size()));
        result.rows.push_back({batch[i].id, pos});
      }
      plan.seq_of_token.push_back(static_cast<int32_t>(i));
      plan.pos_of_token.push_back(static_cast<int32_t>(pos));
      plan.tokens.push_back(batch[i].tokens[j]);
    }
  }
  RETURN_IF_ERROR(graph_->Run(plan, &result.logits));
  for (size_t i = 0; i < batch.size(); ++i) {
    seqs[i]->length += static_cast<int64_t>(batch[i].tokens.size());
  }
  return result;
}

}  // namespace walsh
