// The inference engine: the bookkeeping around the qwen35 forward pass (qwen35_graph.h) over a
// batch of sequences that each bring any number of new tokens (prefill chunks and decode steps
// mixed). The engine owns sequences, KV page tables, state slots and validation; the graph runs
// on a backend (backend.h: the CPU, or CUDA) that owns the device memory.
//
// Schedule invariance: a token's logits are bit-identical however its sequence was fed (whole
// prompt, chunks of any size, one token at a time), whatever else shares the batch and however
// many threads run. Every reduction runs in one fixed order per token: matmul rows are
// computed whole by one thread (kernels/cpu/ternary_matmul.h), attention reduces over keys in
// position order, and the GatedDeltaNet recurrence runs token by token in prefill as in decode.
// The per-token float ops are shared by every backend (kernels/token_ops.h).
#ifndef WALSH_WORKER_ENGINE_ENGINE_H_
#define WALSH_WORKER_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/engine/backend.h"
#include "worker/engine/backend_group.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/kv_page_pool.h"
#include "worker/engine/model.h"
#include "worker/engine/prefix_cache.h"
#include "worker/engine/qwen35_graph.h"
#include "worker/engine/state_slot_pool.h"
#include "worker/parallel/shard_plan.h"

namespace walsh {

using SequenceId = int64_t;

struct SequenceInput {
  SequenceId id = 0;
  std::vector<int32_t> tokens;  // appended at the sequence's current length
  bool all_logits = false;      // logits for every new token; otherwise for the last one only
};

struct ForwardResult {
  struct Row {
    SequenceId id;
    int64_t position;  // position of the token whose next-token logits these are
  };
  int64_t vocab = 0;
  std::vector<Row> rows;
  std::vector<float> logits;  // rows.size() x vocab

  const float* RowLogits(size_t i) const { return logits.data() + i * vocab; }
};

// kv_pages_used counts the pages sequences hold; pages only the prefix cache holds are free
// (it gives them back under pressure) and are counted in PrefixCacheStats.
struct EngineStats {
  int64_t kv_pages_used, kv_pages_total, state_slots_used, state_slots_total;
};

// What a new sequence found in the prefix cache.
enum class PrefixOutcome {
  kHit,         // it starts from a snapshot
  kNoPrefix,    // nothing of it is cached
  kNoSnapshot,  // some of its pages are cached, but no snapshot on them it could use
  kNoRoom,      // a snapshot matched, but no page was free for its partial page
  kOff,         // prefix caching is off
};
const char* PrefixOutcomeName(PrefixOutcome o);

struct PrefixLookup {
  PrefixOutcome outcome = PrefixOutcome::kOff;
  int64_t kv_tokens = 0;   // tokens whose KV pages are cached (whole pages)
  int64_t hit_tokens = 0;  // tokens the sequence starts with (its length)
};

struct PrefixCacheStats {
  int64_t pages = 0, snapshots = 0, snapshot_slots = 0;
  int64_t page_bytes = 0, snapshot_bytes = 0;  // held by the cache (pages in use included)
  int64_t page_evictions = 0, snapshot_evictions = 0;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<Model> model,
                                                        const EngineOptions& options,
                                                        const EngineFaults& faults = {});
  ~Engine();

  const Model& model() const { return *model_; }
  const Backend& backend(int rank = 0) const { return group_.backend(rank); }
  // "cuda", or the CPU kernels' ISA ("avx2", "scalar", "avx512vnni").
  std::string kernels() const { return group_.kernels(); }
  // Device memory of all ranks' backends together, or of one rank (bytes; the CPU reports its
  // caches only).
  BackendMemory Memory() const;
  BackendMemory RankMemory(int rank) const { return group_.backend(rank).Memory(); }
  int64_t max_context() const { return max_context_; }
  int64_t page_size() const { return kv_.page_size(); }
  // How KV pages store keys and values, the bytes one token's keys and values take in every
  // attention layer (all ranks together), and the most tokens the KV pool holds.
  KvCacheDtype kv_cache_dtype() const { return kv_dtype_; }
  int64_t kv_bytes_per_token() const { return page_bytes_ / kv_.page_size(); }
  int64_t kv_token_capacity() const { return kv_.total() * kv_.page_size(); }

  // A new empty sequence; RESOURCE_EXHAUSTED when no state slot is free.
  absl::StatusOr<SequenceId> AddSequence();
  // A new sequence that starts from the longest prefix of `tokens` the prefix cache restores
  // exactly (at most all but the last token; its length says how many); `lookup` says what was
  // found.
  absl::StatusOr<SequenceId> AddSequence(absl::Span<const int32_t> tokens, PrefixLookup* lookup);
  // The KV pages a new sequence of `tokens` would share, from a prefix-cache hit, with pages
  // already in use: admission need not find them free. Changes nothing.
  int64_t SharedPagesInUse(absl::Span<const int32_t> tokens) const;
  // Snapshots the sequence's GatedDeltaNet state (and partial last page) at its length for the
  // prefix cache. False when it is cached already, caching is off, or the budget has no room.
  // `speculative` marks one taken on the chance a request branches there (an interval snapshot):
  // evicted before the others (prefix_cache.h).
  absl::StatusOr<bool> Snapshot(SequenceId id, bool speculative = false);
  bool prefix_caching() const { return prefix_ != nullptr; }
  PrefixCacheStats PrefixStats() const;
  // Frees the sequence's KV pages and state slot.
  absl::Status RemoveSequence(SequenceId id);
  absl::StatusOr<int64_t> SequenceLength(SequenceId id) const;
  // The KV pages the sequence's page table holds (shared ones included); 0 for an unknown one.
  int64_t PagesHeld(SequenceId id) const;

  // The KV pages a step over `batch` would take from the pool (its sequences' new pages); the
  // scheduler preempts before the step when they are not to be had. Changes nothing.
  int64_t PagesToGrow(const std::vector<SequenceInput>& batch) const;
  // Runs one step over the batch. Validates everything first: on error (unknown or repeated
  // sequence, token out of range, context or KV pages exhausted) no sequence changes.
  absl::StatusOr<ForwardResult> Forward(const std::vector<SequenceInput>& batch);

  EngineStats Stats() const;

  // A projection runs only on the transform its weights were folded with (the fork's graph
  // check, docs/format.md §6): qwen35_graph.h.
  using Transform = ::walsh::Transform;
  using InputTag = Qwen35Graph::InputTag;
  static Transform RequiredTransform(const Projection& p) {
    return Qwen35Graph::RequiredTransform(p);
  }
  static absl::Status CheckInput(const Projection& p, const InputTag& tag, const int8_t* signs) {
    return Qwen35Graph::CheckInput(p, tag, signs);
  }
  int tp() const { return options_.tp; }
  // A collective failed (a rank stalled or died): the group is broken and every later step
  // fails; the server reports NOT_SERVING.
  bool broken() const { return group_.broken(); }
  // The tensor-parallel plan (one rank when tp is 1).
  const ShardPlan& shard_plan() const { return *plan_; }

 private:
  struct Sequence {
    int64_t length = 0;
    int32_t slot = -1;
    std::vector<int32_t> pages;
    // With prefix caching: the tokens fed, and the cache nodes of the full pages (every full
    // page is one; the partial last page is the sequence's own).
    std::vector<int32_t> tokens;
    std::vector<PrefixCache::NodeId> nodes;
  };
  absl::Status ForEachRank(const std::function<absl::Status(Backend&)>& op);
  void CommitFullPages(Sequence& sq);
  // Pages the sequence takes from the pool to grow by `tokens`.
  int64_t NewPages(const Sequence& sq, int64_t tokens) const;
  Engine(std::unique_ptr<Model> model, const EngineOptions& options, BackendGroup group,
         int64_t pages, int64_t slots);

  std::unique_ptr<Model> model_;
  EngineOptions options_;
  BackendGroup group_;
  int64_t max_context_;
  KvPagePool kv_;
  StateSlotPool states_;
  std::unique_ptr<PrefixCache> prefix_;  // null when prefix caching is off
  int64_t slot_bytes_ = 0, page_bytes_ = 0;
  KvCacheDtype kv_dtype_ = KvCacheDtype::kFp16;
  std::unique_ptr<ShardPlan> plan_;
  std::vector<std::unique_ptr<Qwen35Graph>> graphs_;  // one per rank, over group_'s backends
  absl::flat_hash_map<SequenceId, Sequence> sequences_;
  SequenceId next_id_ = 1;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_ENGINE_H_
