// Token masks computed ahead, on threads of their own, while the forward pass whose logits they
// will filter runs (docs/structured_output.md §Overlap). A job holds one sequence's next mask:
// a pool thread computes it, or the sampler does when it needs the mask before any thread has
// begun, so a busy pool never makes a step wait longer than computing the mask itself would.
// Idle threads warm newly compiled grammars.
#ifndef WALSH_WORKER_CONSTRAINT_MASK_PREFETCHER_H_
#define WALSH_WORKER_CONSTRAINT_MASK_PREFETCHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "worker/constraint/grammar_matcher.h"

namespace walsh {

class MaskJob {
 public:
  explicit MaskJob(const GrammarMatcher* matcher) : matcher_(matcher) {}

  // The matcher's mask (GrammarMatcher::FillMask); waits while a pool thread computes it. Once
  // per job, and never after Cancel().
  std::vector<uint64_t> Take() ABSL_LOCKS_EXCLUDED(mu_);
  // Before the matcher changes or goes away: a queued job is dropped, a running one awaited.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  // A pool thread's part: computes the mask unless the job was taken or cancelled.
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class State { kQueued, kRunning, kDone, kCancelled };
  // Claims a queued job for the calling thread; false when another has it or it is over.
  bool Claim() ABSL_LOCKS_EXCLUDED(mu_);
  void Compute() ABSL_LOCKS_EXCLUDED(mu_);

  const GrammarMatcher* const matcher_;
  Mutex mu_;
  CondVar done_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kQueued;
  std::vector<uint64_t> bits_ ABSL_GUARDED_BY(mu_);
};

class MaskPrefetcher {
 public:
  explicit MaskPrefetcher(int threads);  // at least 1
  ~MaskPrefetcher();                     // joins; jobs still queued stay with their owners
  MaskPrefetcher(const MaskPrefetcher&) = delete;
  MaskPrefetcher& operator=(const MaskPrefetcher&) = delete;

  // Queues `matcher`'s mask. The matcher must not change or go away before the job's Take()
  // or Cancel() returns.
  std::shared_ptr<MaskJob> Start(const GrammarMatcher* matcher) ABSL_LOCKS_EXCLUDED(mu_);
  // Warms `grammar`'s context masks (CompiledGrammar::WarmNext) when no mask is queued, one
  // context at a time, so a queued mask waits for at most one context's walks (its position
  // alone, then with the frame below); stops early when the grammar goes away (evicted, and no
  // request holds it).
  void Warm(std::weak_ptr<const CompiledGrammar> grammar) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  Mutex mu_;
  CondVar wake_;
  std::deque<std::shared_ptr<MaskJob>> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<std::weak_ptr<const CompiledGrammar>> warming_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_CONSTRAINT_MASK_PREFETCHER_H_
