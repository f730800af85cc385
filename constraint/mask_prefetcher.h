// Token masks computed ahead, on threads of their own, while the forward pass whose logits they
// will filter runs (docs/structured_output.md §Overlap). A job holds one sequence's next mask
// under its budget (mask_budget.h): a pool thread computes it, or Take() does when no thread has
// begun. A caller that must not wait (the scheduler) asks Ready() first, and the job's callback
// tells it when that changes. Idle threads warm newly compiled grammars while some
// request still uses them.
#ifndef WALSH_CONSTRAINT_MASK_PREFETCHER_H_
#define WALSH_CONSTRAINT_MASK_PREFETCHER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "constraint/grammar_matcher.h"
#include "constraint/mask_budget.h"

namespace walsh {

class MaskJob {
 public:
  // `cancelled` (optional) is the request's flag: once set, a computing mask stops. `on_done`
  // (optional) is called on the computing thread when the mask is ready, whatever its outcome.
  MaskJob(const GrammarMatcher* matcher, const MaskLimits& limits,
          const std::atomic<bool>* cancelled, std::function<void()> on_done)
      : matcher_(matcher), limits_(limits), cancelled_(cancelled), on_done_(std::move(on_done)) {}

  // The matcher's mask (GrammarMatcher::FillMask), or why its budget ran out; waits while a pool
  // thread computes it, and computes it here when none has begun. Once per job, and never after
  // Cancel().
  absl::StatusOr<std::vector<uint64_t>> Take() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether Take() would return at once with a pool thread's result.
  bool Ready() const ABSL_LOCKS_EXCLUDED(mu_);
  // Before the matcher changes or goes away: a queued job is dropped, a running one stopped and
  // awaited.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  // A pool thread's part: computes the mask unless the job was taken or cancelled.
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class State { kQueued, kRunning, kDone, kCancelled };
  // Claims a queued job for the calling thread; false when another has it or it is over.
  bool Claim() ABSL_LOCKS_EXCLUDED(mu_);
  void Compute() ABSL_LOCKS_EXCLUDED(mu_);

  const GrammarMatcher* const matcher_;
  const MaskLimits limits_;
  const std::atomic<bool>* const cancelled_;
  const std::function<void()> on_done_;
  std::atomic<bool> abandoned_{false};  // Cancel() stops a running computation through it
  mutable Mutex mu_;
  CondVar done_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kQueued;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> bits_ ABSL_GUARDED_BY(mu_);
};

class MaskPrefetcher {
 public:
  // At least 1 thread. `warm_limits` bounds each context a warm-up computes (its work; a context
  // past it ends that grammar's warm-up).
  explicit MaskPrefetcher(int threads, const MaskLimits& warm_limits = {});
  ~MaskPrefetcher();  // joins; jobs still queued stay with their owners
  MaskPrefetcher(const MaskPrefetcher&) = delete;
  MaskPrefetcher& operator=(const MaskPrefetcher&) = delete;

  // Queues `matcher`'s mask (MaskJob's arguments). The matcher must not change or go away
  // before the job's Take() or Cancel() returns.
  std::shared_ptr<MaskJob> Start(const GrammarMatcher* matcher, const MaskLimits& limits = {},
                                 const std::atomic<bool>* cancelled = nullptr,
                                 std::function<void()> on_done = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Warms `grammar`'s context masks (CompiledGrammar::WarmNext) when no mask is queued, one
  // context at a time, so a queued mask waits for at most one context's walks (its position
  // alone, then with the frame below); stops early when the grammar goes away: the caller
  // passes a handle that lives only while some request uses the grammar (ConstraintCache).
  void Warm(std::weak_ptr<const CompiledGrammar> grammar) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const MaskLimits warm_limits_;
  Mutex mu_;
  CondVar wake_;
  std::deque<std::shared_ptr<MaskJob>> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<std::weak_ptr<const CompiledGrammar>> warming_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_MASK_PREFETCHER_H_
