// Sequences run on an engine over a KV manager's memory: the operations that need both, written
// once for the scheduler (worker/server/scheduler.h) and the solo runner (solo_runner.h), which
// each own a manager. The manager decides (which page, slot or plane; which copy), the engine
// carries it out (the copy on every rank; the step on the page tables), and the manager records
// what was done only once it was.
#ifndef WALSH_WORKER_ENGINE_SEQUENCE_RUNNER_H_
#define WALSH_WORKER_ENGINE_SEQUENCE_RUNNER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/engine/engine.h"
#include "worker/engine/kv_manager.h"

namespace walsh {

// The manager planned from the budgets and the engine's room, its pools allocated on the engine.
absl::StatusOr<std::unique_ptr<KvManager>> MakeKvManager(Engine& engine,
                                                         const CacheOptions& options);

class SequenceRunner {
 public:
  // Both outlive the runner.
  SequenceRunner(Engine* engine, KvManager* kv) : engine_(engine), kv_(kv) {}

  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }
  const Model& model() const { return engine_->model(); }
  int64_t max_context() const { return engine_->max_context(); }
  KvManager& kv() { return *kv_; }
  const KvManager& kv() const { return *kv_; }
  int64_t page_size() const { return kv_->page_size(); }
  // The bytes one token's keys and values take in every attention layer (all ranks together).
  int64_t kv_bytes_per_token() const { return kv_->page_bytes() / kv_->page_size(); }

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
  // A checkpoint of the sequence's state at its length (KvManager::Checkpoint; managers without
  // prefix caching): the steps after it are undone at once by RestoreCheckpoint (the sequence
  // is as it was at the checkpoint, as if they had never run) or kept by DropCheckpoint. On a
  // failed restore the sequence is to be removed.
  absl::Status Checkpoint(SequenceId id);
  absl::Status RestoreCheckpoint(SequenceId id);
  absl::Status DropCheckpoint(SequenceId id) { return kv_->EndCheckpoint(id, false); }
  // Runs one step over the batch. Validates everything first: on error (unknown or repeated
  // sequence, token out of range, image inputs malformed or not taken by the backend, context
  // exhausted, or pages not reserved and not to be had) no sequence changes. Pages reserved
  // before (KvManager::Reserve) are not taken again.
  absl::StatusOr<ForwardResult> Forward(const std::vector<SequenceInput>& batch);

  EngineStats Stats() const { return kv_->Stats(); }

  // One token through every layer on a fresh sequence, removed after: whether the engine runs
  // at all, asked before anything is served.
  absl::Status Canary();

 private:
  Engine* engine_;
  KvManager* kv_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_SEQUENCE_RUNNER_H_
