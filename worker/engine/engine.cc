#include "worker/engine/engine.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cache_plan.h"

namespace walsh {

Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Model> model,
                                                       const EngineOptions& options,
                                                       const EngineFaults& faults) {
  if (options.threads < 1 || options.threads > 1024) {
    return absl::InvalidArgumentError("engine threads must be 1..1024");
  }
  if (options.page_size < 1) return absl::InvalidArgumentError("KV page size must be >= 1");
  const bool kv_quantized =
      options.kv_cache_dtype == KvCacheDtype::kQ8 || options.kv_cache_dtype == KvCacheDtype::kQ4;
  if (kv_quantized && model->config().key_length % kKvGroup != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-cache-dtype ", KvCacheDtypeName(options.kv_cache_dtype),
                     " quantizes 32 values of a head at a time; this model's head width (",
                     model->config().key_length, ") is not a multiple of 32"));
  }
  ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Build(model->file(), options.tp));
  ASSIGN_OR_RETURN(BackendGroup group, MakeBackendGroup(*model, options, faults));
  std::unique_ptr<Engine> engine(new Engine(std::move(model), options, std::move(group), 0, 0));
  engine->plan_ = std::make_unique<ShardPlan>(std::move(plan));
  for (int r = 0; r < engine->group_.size(); ++r) {
    engine->graphs_.push_back(std::make_unique<Qwen35Graph>(
        *engine->model_, engine->group_.backend(r), options.quantize_activations, *engine->plan_, r,
        engine->group_.communicator(), options.collective_timeout));
  }
  // Pages and slots from the budgets and the device's room (cache_plan.h).
  const Qwen35Config& c = engine->model_->config();
  const KvCacheDtype kv_dtype =
      !options.quantize_activations && options.kv_cache_dtype == KvCacheDtype::kFp16
          ? KvCacheDtype::kF32
          : options.kv_cache_dtype;
  const int64_t page_bytes = KvPagePool::PageBytes(
      options.page_size, std::max<int64_t>(engine->model_->attention_layers(), 1),
      KvBytes(kv_dtype, c.head_count_kv * c.key_length));
  const int64_t slot_bytes =
      StateSlotPool::SlotBytes(std::max<int64_t>(engine->model_->gdn_layers(), 1),
                               (c.ssm_conv_kernel - 1) * c.gdn_conv_dim(),
                               c.ssm_time_step_rank * c.ssm_state_size * c.ssm_state_size);
  const bool snapshots = options.prefix_caching && engine->model_->attention_layers() > 0;
  ASSIGN_OR_RETURN(const CachePlan caches,
                   PlanCaches({.kv_cache_bytes = options.kv_cache_bytes,
                               .state_bytes = options.state_bytes,
                               .kv_pages = options.kv_pages,
                               .state_slots = options.state_slots,
                               .snapshot_bytes = snapshots ? options.prefix_cache_bytes : 0,
                               .room = engine->group_.backend(0).cache_bytes_available()},
                              page_bytes, slot_bytes));
  const int64_t pages = caches.pages, slots = caches.slots, snapshot_slots = caches.snapshot_slots;
  engine->kv_ = KvPagePool(pages, options.page_size);
  engine->states_ = StateSlotPool(slots);
  engine->slot_bytes_ = slot_bytes;
  engine->page_bytes_ = page_bytes;
  engine->kv_dtype_ = kv_dtype;
  // Prefix keys are KV pages: a model without attention layers has none to share.
  if (snapshots) {
    engine->prefix_ =
        std::make_unique<PrefixCache>(&engine->kv_, snapshot_slots, static_cast<int32_t>(slots));
  }
  for (int r = 0; r < engine->group_.size(); ++r) {
    CacheGeometry g =
        engine->graphs_[r]->Geometry(pages, options.page_size, slots + snapshot_slots);
    g.kv_dtype = kv_dtype;
    RETURN_IF_ERROR(engine->group_.backend(r).AllocateCaches(g));
  }
  return engine;
}

Engine::Engine(std::unique_ptr<Model> model, const EngineOptions& options, BackendGroup group,
               int64_t pages, int64_t slots)
    : model_(std::move(model)),
      options_(options),
      group_(std::move(group)),
      max_context_(options.max_context > 0
                       ? std::min(options.max_context, model_->config().context_length)
                       : model_->config().context_length),
      kv_(pages, options.page_size),
      states_(slots) {}

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

const char* PrefixOutcomeName(PrefixOutcome o) {
  switch (o) {
    case PrefixOutcome::kHit:
      return "hit";
    case PrefixOutcome::kNoPrefix:
      return "no_prefix";
    case PrefixOutcome::kNoSnapshot:
      return "no_snapshot";
    case PrefixOutcome::kNoRoom:
      return "no_room";
    case PrefixOutcome::kOff:
      return "off";
  }
  return "off";
}

absl::Status Engine::ForEachRank(const std::function<absl::Status(Backend&)>& op) {
  for (int r = 0; r < group_.size(); ++r) RETURN_IF_ERROR(op(group_.backend(r)));
  return absl::OkStatus();
}

absl::StatusOr<SequenceId> Engine::AddSequence() { return AddSequence({}, nullptr); }

int64_t Engine::SharedPagesInUse(absl::Span<const int32_t> tokens) const {
  if (prefix_ == nullptr || tokens.empty()) return 0;
  // As AddSequence looks up: the hit leaves the last token to compute.
  const PrefixCache::Match match = prefix_->Lookup(tokens, static_cast<int64_t>(tokens.size()) - 1);
  if (!match.snapshot) return 0;
  return prefix_->InUseAmong(match, match.snapshot->length / kv_.page_size());
}

absl::StatusOr<SequenceId> Engine::AddSequence(absl::Span<const int32_t> tokens,
                                               PrefixLookup* lookup) {
  PrefixLookup found;
  std::optional<PrefixCache::Match> match;
  if (prefix_ != nullptr && !tokens.empty()) {
    match = prefix_->Lookup(tokens, static_cast<int64_t>(tokens.size()) - 1);
    found.kv_tokens = match->kv_tokens;
    found.outcome = match->snapshot        ? PrefixOutcome::kHit
                    : match->kv_tokens > 0 ? PrefixOutcome::kNoSnapshot
                                           : PrefixOutcome::kNoPrefix;
  }
  ASSIGN_OR_RETURN(int32_t slot, states_.Allocate());
  const SequenceId id = next_id_++;
  Sequence& sq = sequences_[id];
  sq.slot = slot;
  absl::Status s;
  if (found.outcome == PrefixOutcome::kHit) {
    const PrefixCache::Snapshot& snap = *match->snapshot;
    int32_t fresh = -1;
    if (snap.tail_page >= 0) {
      // The hit's own pages are pinned first, so making room cannot evict them.
      const int64_t full = snap.length / kv_.page_size();
      for (int64_t i = 0; i < full; ++i) prefix_->AddUser(match->nodes[i]);
      if (kv_.free() > 0 || prefix_->MakeRoom(1, match->snapshot_id)) {
        fresh = (*kv_.Allocate(1))[0];
      }
      for (int64_t i = 0; i < full; ++i) prefix_->RemoveUser(match->nodes[i]);
      if (fresh < 0) found.outcome = PrefixOutcome::kNoRoom;
    }
    if (found.outcome == PrefixOutcome::kHit) {
      const size_t full = static_cast<size_t>(snap.length / kv_.page_size());
      sq.nodes.assign(match->nodes.begin(), match->nodes.begin() + full);
      sq.pages.assign(match->pages.begin(), match->pages.begin() + full);
      for (PrefixCache::NodeId n : sq.nodes) prefix_->AddUser(n);
      if (fresh >= 0) sq.pages.push_back(fresh);
      sq.tokens.assign(tokens.begin(), tokens.begin() + snap.length);
      sq.length = snap.length;
      prefix_->Hit(match->snapshot_id);
      found.hit_tokens = snap.length;
      s = ForEachRank([&](Backend& b) -> absl::Status {
        RETURN_IF_ERROR(b.CopyStateSlot(snap.slot, slot));
        return fresh >= 0 ? b.CopyKvPage(snap.tail_page, fresh) : absl::OkStatus();
      });
    }
  }
  if (found.outcome != PrefixOutcome::kHit) {
    s = ForEachRank([&](Backend& b) { return b.ClearStateSlot(slot); });
  }
  if (!s.ok()) {
    (void)RemoveSequence(id);
    return s;
  }
  if (lookup != nullptr) *lookup = found;
  return id;
}

absl::StatusOr<bool> Engine::Snapshot(SequenceId id, bool speculative) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  Sequence& sq = it->second;
  if (prefix_ == nullptr || sq.length == 0) return false;
  const int64_t page = kv_.page_size();
  const int64_t full = sq.length / page;
  const PrefixCache::NodeId node = full == 0 ? PrefixCache::kRoot : sq.nodes[full - 1];
  const absl::Span<const int32_t> tail =
      absl::MakeConstSpan(sq.tokens).subspan(full * page, sq.length - full * page);
  if (prefix_->Touch(node, tail)) return false;
  std::optional<PrefixCache::Snapshot> snap = prefix_->AddSnapshot(
      node, tail, sq.length,
      speculative ? PrefixCache::SnapshotTier::kSpeculative : PrefixCache::SnapshotTier::kOrdinary);
  if (!snap) return false;
  const absl::Status copied = ForEachRank([&](Backend& b) -> absl::Status {
    RETURN_IF_ERROR(b.CopyStateSlot(sq.slot, snap->slot));
    return snap->tail_page >= 0 ? b.CopyKvPage(sq.pages[full], snap->tail_page) : absl::OkStatus();
  });
  if (!copied.ok()) {
    prefix_->DropSnapshot(snap->id);  // never restore a copy that did not complete
    return copied;
  }
  return true;
}

PrefixCacheStats Engine::PrefixStats() const {
  PrefixCacheStats st;
  if (prefix_ == nullptr) return st;
  const PrefixCache::Counts c = prefix_->counts();
  const int64_t page_bytes = page_bytes_;
  st.pages = c.nodes;
  st.snapshots = c.snapshots;
  st.snapshot_slots = prefix_->snapshot_slots();
  st.page_bytes = c.nodes * page_bytes;
  st.snapshot_bytes = c.snapshots * slot_bytes_ + c.tail_pages * page_bytes;
  st.page_evictions = c.page_evictions;
  st.snapshot_evictions = c.snapshot_evictions;
  return st;
}

void Engine::CommitFullPages(Sequence& sq) {
  const int64_t page = kv_.page_size();
  while (static_cast<int64_t>(sq.nodes.size() + 1) * page <= sq.length) {
    const size_t i = sq.nodes.size();
    const PrefixCache::NodeId parent = i == 0 ? PrefixCache::kRoot : sq.nodes[i - 1];
    sq.nodes.push_back(prefix_->Commit(
        parent, absl::MakeConstSpan(sq.tokens).subspan(i * page, page), &sq.pages[i]));
  }
}

absl::Status Engine::RemoveSequence(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  Sequence& sq = it->second;
  for (PrefixCache::NodeId n : sq.nodes) prefix_->RemoveUser(n);
  kv_.Release(std::vector<int32_t>(sq.pages.begin() + sq.nodes.size(), sq.pages.end()));
  states_.Release(sq.slot);
  sequences_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Engine::SequenceLength(SequenceId id) const {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  return it->second.length;
}

int64_t Engine::PagesHeld(SequenceId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? 0 : static_cast<int64_t>(it->second.pages.size());
}

EngineStats Engine::Stats() const {
  const int64_t cached = prefix_ != nullptr ? prefix_->counts().reclaimable_pages : 0;
  return {kv_.used() - cached, kv_.total(), states_.used(), states_.total()};
}

int64_t Engine::NewPages(const Sequence& sq, int64_t tokens) const {
  const int64_t pages = (sq.length + tokens + kv_.page_size() - 1) / kv_.page_size();
  return std::max<int64_t>(0, pages - static_cast<int64_t>(sq.pages.size()));
}

int64_t Engine::PagesToGrow(const std::vector<SequenceInput>& batch) const {
  if (model_->attention_layers() == 0) return 0;
  int64_t pages_needed = 0;
  for (const SequenceInput& in : batch) {
    auto it = sequences_.find(in.id);
    if (it == sequences_.end()) continue;
    pages_needed += NewPages(it->second, static_cast<int64_t>(in.tokens.size()));
  }
  return pages_needed;
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
    pages_needed += NewPages(sq, static_cast<int64_t>(in.tokens.size()));
    seqs.push_back(&sq);
  }
  if (model_->attention_layers() > 0) {
    if (prefix_ != nullptr && kv_.free() < pages_needed) prefix_->MakeRoom(pages_needed);
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
  const absl::Status run =
      group_.Run([&](int rank) { return graphs_[rank]->Run(plan, &result.logits); });
  if (!run.ok()) {
    // Layers before the failure have advanced their state, so this is never a "nothing
    // changed" RESOURCE_EXHAUSTED (only the page allocation above says that), whatever the
    // cause; a lost tensor-parallel rank keeps its DEADLINE_EXCEEDED.
    if (run.code() == absl::StatusCode::kDeadlineExceeded) return run;
    return absl::InternalError(absl::StrCat("forward step failed: ", run.message()));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    seqs[i]->length += static_cast<int64_t>(batch[i].tokens.size());
    if (prefix_ != nullptr && model_->attention_layers() > 0) {
      seqs[i]->tokens.insert(seqs[i]->tokens.end(), batch[i].tokens.begin(), batch[i].tokens.end());
      CommitFullPages(*seqs[i]);
    }
  }
  return result;
}

}  // namespace walsh
