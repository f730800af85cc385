// Continuous batching over one engine. The scheduler owns the sequences' memory (its KV manager,
// kv_manager.h, planned on the engine at creation) and one thread that runs steps: drop
// cancelled and expired requests, admit waiting ones (priority, then arrival) while a batch
// place, a state slot and the KV pages they will take can be had (the KV manager says how
// many: pages shared with running requests count once, and pages
// running requests will still take for their input are reserved), fill a per-step token
// budget with decode tokens first and prefill chunks after, reserve the step's pages, run the
// forward pass, sample, stream. When a step's pages cannot be reserved, the request that
// arrived last is preempted by recompute before the step runs (vLLM's rule: the youngest gives
// way, and stays the first to give way when it comes back): its sequence is freed and it
// re-queues with prompt + outputs, which, the engine being schedule-invariant, continues
// exactly where it was. Its mutex guards bookkeeping only: the sinks' events (which serialize
// responses) are queued under it and delivered after it is released, in order. The decisions
// themselves are pure functions (scheduling_policy.h); this class holds the state, the thread
// and the engine. It speaks engine and domain types only: responses and gRPC statuses are made
// at the service edge (services.cc).
#ifndef WALSH_WORKER_SERVER_SCHEDULER_H_
#define WALSH_WORKER_SERVER_SCHEDULER_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "constraint/mask_prefetcher.h"
#include "worker/engine/engine.h"
#include "worker/engine/kv_manager.h"
#include "worker/engine/sequence_runner.h"
#include "worker/server/active_request.h"
#include "worker/server/scheduling_policy.h"
#include "worker/server/worker_metrics.h"
#include "worker/speculative/drafter.h"

namespace walsh {

// The defaults are the product's: walsh-worker's flags start from them (worker_server.h).
struct SchedulerOptions {
  int64_t max_batch_tokens = 512;  // tokens per forward pass
  int64_t max_running = 16;        // sequences in the running batch
  int64_t max_queue = 256;         // waiting requests; beyond: RESOURCE_EXHAUSTED
  // Prefixes shorter than this get no GatedDeltaNet snapshot (snapshot_policy.h).
  int64_t prefix_min_tokens = 128;
  // A snapshot every this many tokens of a prefill (whole pages; 0: none), so that the first
  // request that branches off a shared document hits (snapshot_policy.h).
  int64_t prefix_snapshot_interval = 512;
  // Speculative decoding (docs/speculative_decoding.md): each decode step of a request has the
  // drafter propose up to this many tokens (fewer when the request asks) and verifies them in
  // the same pass; 0 or no drafter: off. Off while more than speculative_max_batch requests
  // run, and paused for a request whose acceptance rate falls below speculative_min_acceptance
  // (draft_backoff.h). The drafter is the caller's and outlives the scheduler.
  int64_t speculative_tokens = 0;
  int64_t speculative_max_batch = 8;
  double speculative_min_acceptance = 0.3;
  Drafter* drafter = nullptr;
  // Structured output: each constrained request's next mask is computed on these threads while
  // the forward pass runs (docs/structured_output.md §Overlap); null: after it, on the
  // scheduler's thread. The caller's, and outlives the scheduler.
  MaskPrefetcher* mask_prefetcher = nullptr;
};

struct SchedulerLoad {
  int64_t running = 0, waiting = 0;
  EngineStats engine{};
  double tokens_per_second = 0;
};

// The KV pool's sizes, fixed when the scheduler is created.
struct CacheSize {
  int64_t page_size = 0, pages = 0;
  int64_t bytes_per_token = 0;  // one token's keys and values in every attention layer
  bool prefix_caching = false;
};

class Scheduler {
 public:
  // Plans the sequences' memory from the budgets and the room the engine reports, has the engine
  // allocate it, runs one canary step on it, then starts the thread. The engine outlives it.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(Engine* engine,
                                                           const CacheOptions& caches,
                                                           const SchedulerOptions& options,
                                                           WorkerMetrics* metrics);
  ~Scheduler();  // stops the thread; unfinished requests end with UNAVAILABLE

  // Queues a request; RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE when draining.
  absl::Status Submit(std::shared_ptr<ActiveRequest> request) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops admitting new requests (Submit answers UNAVAILABLE).
  void StopAdmitting() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every request still queued or running with `status`.
  void CancelAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes the loop (a reactor marked a request cancelled).
  void Wake();
  SchedulerLoad Load() const ABSL_LOCKS_EXCLUDED(mu_);
  // How long the step now running has run (0 between steps): the health watchdog's reading.
  double StepSeconds() const;
  const CacheSize& cache_size() const { return cache_size_; }

 private:
  Scheduler(Engine* engine, std::unique_ptr<KvManager> kv, const SchedulerOptions& options,
            WorkerMetrics* metrics);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // The status a request ends with when its step (or its admission) failed.
  absl::Status StepFailure(const absl::Status& s) const;
  // One step's work from planning to commit (Step, below).
  struct StepWork {
    std::vector<BatchCandidate> candidates;    // per running request
    std::vector<DraftRequest> asks;            // what the drafter is asked
    std::vector<size_t> asked;                 // asks[j] drafts for running_[asked[j]]
    std::vector<std::vector<int32_t>> drafts;  // per running request, cut to the budget
    int64_t held = 0, awaiting_masks = 0;
    std::vector<SequenceInput> batch;  // the engine's step, and whose each entry is
    std::vector<ActiveRequest*> members;
    std::vector<std::vector<int32_t>> member_drafts;
    // From the forward pass on, per member:
    absl::StatusOr<ForwardResult> out;
    double seconds = 0;
    std::vector<bool> samples, deferred;
    std::vector<std::vector<GeneratedToken>> sampled;
    std::vector<absl::Status> sampling, rolled_back;
  };
  // plan -> draft -> batch -> reserve -> forward (and verify) -> commit.
  void Step() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Each running request's candidacy for the step, and the drafts to ask for.
  StepWork PlanStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the drafter (with mu_ released) and shares the budget between the drafts.
  void DraftStep(StepWork& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The engine's batch: decodes (and their drafts) first, then prefill chunks.
  void BatchStep(StepWork& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The step's pages and planes, dropping drafts, then preempting, when they cannot be had;
  // false when the step does not run.
  bool ReserveStep(StepWork& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The forward pass, sampling and verification, with mu_ released.
  void RunStep(StepWork& w) ABSL_LOCKS_EXCLUDED(mu_);
  // What the step fed, sampled and verified: counted, streamed, snapshotted.
  void CommitStep(StepWork& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordVerified(ActiveRequest& r, const std::vector<int32_t>& drafts,
                      const std::vector<GeneratedToken>& sampled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Admit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Preempt() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Samples the requests whose deferred sample's mask is now ready (with mu_ released while
  // sampling), and streams what they drew.
  void SampleDeferred() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Streams a request's newly sampled tokens and ends it when one finishes it; how many.
  int64_t Emit(ActiveRequest& r, std::vector<GeneratedToken>& sampled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a request whose sampling failed (its constraint's budget ran out).
  void EndSamplingFailed(ActiveRequest& r, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pages the running requests will still take for the tokens they have (scheduling_policy.h).
  int64_t ReservedPages() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(ActiveRequest& r, FinishReason reason, const std::string& matched)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndWithStatus(ActiveRequest& r, const absl::Status& status, const char* reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the queued sink events with mu_ released (they serialize responses), in order.
  void DeliverEvents() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Release(ActiveRequest& r);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeSnapshot(ActiveRequest& r, const char* at);
  // How many tokens a decode step of `r` may draft: its own and the worker's limit, never past
  // its max_tokens, the context limit or `planes_free`; 0 while its back-off pauses it.
  int64_t DraftLimit(ActiveRequest& r, int64_t planes_free) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Engine* engine_;
  std::unique_ptr<KvManager> kv_;  // the scheduler thread's
  SequenceRunner sequences_;       // engine_ over kv_
  const CacheSize cache_size_;
  SchedulerOptions options_;
  WorkerMetrics* metrics_;
  mutable Mutex mu_;  // guards waiting_, the counters, admitting_, stop_
  CondVar cv_;
  std::deque<std::shared_ptr<ActiveRequest>> waiting_ ABSL_GUARDED_BY(mu_);
  // Scheduler thread only.
  std::vector<std::shared_ptr<ActiveRequest>> running_ ABSL_GUARDED_BY(mu_);
  int64_t running_count_ ABSL_GUARDED_BY(mu_) = 0;
  EngineStats engine_stats_ ABSL_GUARDED_BY(mu_){};
  // For tokens/s.
  std::deque<std::pair<Clock::time_point, int64_t>> token_times_ ABSL_GUARDED_BY(mu_);
  uint64_t arrivals_ ABSL_GUARDED_BY(mu_) = 0;
  bool preempted_this_step_ ABSL_GUARDED_BY(mu_) = false;
  PrefixCacheStats prefix_seen_ ABSL_GUARDED_BY(mu_){};  // evictions already counted
  bool admitting_ ABSL_GUARDED_BY(mu_) = true;
  bool cancel_all_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status cancel_all_status_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Backpressure: the last step found nothing to run but requests whose clients have not read
  // (ResponseSink::HasRoom); it then waits for a wake (counted, so none is missed) or 100 ms.
  bool only_held_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t wakes_ ABSL_GUARDED_BY(mu_) = 0;
  // Sink calls decided under mu_ and made after it is released, in the order decided.
  std::vector<std::function<void()>> outbox_ ABSL_GUARDED_BY(mu_);
  // How a mask thread wakes the loop when a deferred sample's mask is ready; detached when the
  // scheduler stops, so a mask that ends later wakes nothing.
  struct MaskWaker {
    Mutex mu;
    Scheduler* scheduler ABSL_GUARDED_BY(mu) = nullptr;
  };
  std::shared_ptr<MaskWaker> mask_waker_ = std::make_shared<MaskWaker>();
  std::atomic<int64_t> step_started_ns_{0};  // steady clock; 0 between steps
  std::thread thread_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_SCHEDULER_H_
