// The inference engine: the bookkeeping around the qwen35 forward pass (qwen35_graph.h) over a
// batch of sequences that each bring any number of new tokens (prefill chunks and decode steps
// mixed). The engine validates steps and runs them; the KV manager it holds (kv_manager.h)
// decides which page and slot is whose, and the graph runs on a backend (backend.h: the CPU, or
// CUDA) that owns the device memory.
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

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/engine/backend.h"
#include "worker/engine/backend_group.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/kv_manager.h"
#include "worker/engine/model.h"
#include "worker/engine/qwen35_graph.h"
#include "worker/engine/rank_command.h"
#include "worker/parallel/shard_plan.h"

namespace walsh {

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

class Engine {
 public:
  // With a process group, this engine is its leader (rank 0): it mirrors every operation on its
  // backend to the followers (rank_follower.h) before running it.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<Model> model,
                                                        const EngineOptions& options,
                                                        const EngineFaults& faults = {},
                                                        ProcessGroup process_group = {});
  ~Engine();

  const Model& model() const { return *model_; }
  const Backend& backend(int rank = 0) const { return group_.backend(rank); }
  // "cuda", or the CPU kernels' ISA ("avx2", "scalar", "avx512vnni", "avx512vbmi").
  std::string kernels() const { return group_.kernels(); }
  // Device memory of all ranks' backends together, or of one rank (bytes; the CPU reports its
  // caches only).
  BackendMemory Memory() const;
  BackendMemory RankMemory(int rank) const { return group_.backend(rank).Memory(); }
  // The ranks this process holds (all tp of them, or the leader's one of a group across
  // processes): RankMemory's and backend()'s indices.
  int local_ranks() const { return group_.size(); }
  int64_t max_context() const { return max_context_; }
  // The memory of the sequences: pages, slots, the prefix cache (kv_manager.h). The scheduler
  // plans admission and reserves each step's pages with it.
  KvManager& kv() { return *kv_; }
  const KvManager& kv() const { return *kv_; }
  int64_t page_size() const { return kv_->page_size(); }
  // How KV pages store keys and values, the bytes one token's keys and values take in every
  // attention layer (all ranks together), and the most tokens the KV pool holds.
  KvCacheDtype kv_cache_dtype() const { return kv_dtype_; }
  int64_t kv_bytes_per_token() const { return kv_->page_bytes() / kv_->page_size(); }
  int64_t kv_token_capacity() const { return kv_->total_pages() * kv_->page_size(); }

  // A new empty sequence; RESOURCE_EXHAUSTED when no state slot is free.
  absl::StatusOr<SequenceId> AddSequence();
  // A new sequence that starts from the longest prefix of `tokens` the prefix cache restores
  // exactly (at most all but the last token; its length says how many); `lookup` says what was
  // found.
  absl::StatusOr<SequenceId> AddSequence(absl::Span<const int32_t> tokens, PrefixLookup* lookup);
  // Snapshots the sequence's GatedDeltaNet state (and partial last page) at its length for the
  // prefix cache. False when it is cached already, caching is off, or the budget has no room.
  // `speculative` marks one taken on the chance a request branches there (an interval snapshot):
  // evicted before the others (prefix_cache.h).
  absl::StatusOr<bool> Snapshot(SequenceId id, bool speculative = false);
  bool prefix_caching() const { return kv_->prefix_caching(); }
  PrefixCacheStats PrefixStats() const { return kv_->PrefixStats(); }
  // Frees the sequence's KV pages and state slot.
  absl::Status RemoveSequence(SequenceId id) { return kv_->RemoveSequence(id); }
  absl::StatusOr<int64_t> SequenceLength(SequenceId id) const { return kv_->SequenceLength(id); }

  // Ends a speculative step (SequenceInput::keep_states) at `length` tokens, from the length
  // before it + 1 (only the step's first token kept) to the length now (all kept): positions
  // past it are dropped and the GatedDeltaNet state is the one after token length - 1, as if
  // only those tokens had been fed. On error the sequence is to be removed.
  absl::Status Rollback(SequenceId id, int64_t length);
  // A checkpoint of the sequence's state at its length (KvManager::Checkpoint; engines without
  // prefix caching): the steps after it are undone at once by RestoreCheckpoint (the sequence
  // is as it was at the checkpoint, as if they had never run) or kept by DropCheckpoint. On a
  // failed restore the sequence is to be removed.
  absl::Status Checkpoint(SequenceId id);
  absl::Status RestoreCheckpoint(SequenceId id);
  absl::Status DropCheckpoint(SequenceId id) { return kv_->EndCheckpoint(id, false); }
  // Runs one step over the batch. Validates everything first: on error (unknown or repeated
  // sequence, token out of range, image inputs malformed or not taken by the backend, context
  // exhausted, or pages not reserved and not to be had) no sequence changes. Pages the scheduler
  // reserved (KvManager::Reserve) are not taken again.
  absl::StatusOr<ForwardResult> Forward(const std::vector<SequenceInput>& batch);

  EngineStats Stats() const { return kv_->Stats(); }

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
  absl::Status CheckImageInputs(const SequenceInput& in) const;
  // Bytes the caches may take on the tightest rank this process holds.
  int64_t CacheRoom() const;
  // Sends the command to the ranks other processes hold (none: nothing to do).
  absl::Status Mirror(const RankCommand& command);
  absl::Status ForEachRank(const std::function<absl::Status(Backend&)>& op);
  absl::Status Copy(const CacheCopy& copy);
  Engine(std::unique_ptr<Model> model, const EngineOptions& options, BackendGroup group);

  std::unique_ptr<Model> model_;
  EngineOptions options_;
  BackendGroup group_;
  int64_t max_context_;
  std::unique_ptr<KvManager> kv_;
  KvCacheDtype kv_dtype_ = KvCacheDtype::kFp16;
  std::unique_ptr<ShardPlan> plan_;
  std::vector<std::unique_ptr<Qwen35Graph>> graphs_;  // one per rank, over group_'s backends
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_ENGINE_H_
