// A fixed pool of worker threads for data-parallel loops. The caller's thread takes part, so
// a pool of N threads has N - 1 workers. Idle workers spin briefly before they sleep. Which thread
// computes which item never changes the result: every output element is computed whole by exactly
// one thread.
#ifndef WALSH_KERNELS_CPU_THREAD_POOL_H_
#define WALSH_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace walsh {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) in chunks of at most `grain`, spread over the threads,
  // and returns when all are done. Not reentrant.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void RunChunks();

  std::vector<std::thread> workers_;
  Mutex mu_;
  CondVar start_cv_, done_cv_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The current loop. Not guarded: written under mu_ before the generation bump, then only read
  // (by RunChunks) until every worker is done.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<int64_t> next_{0};
  // Mirrors of generation_ and busy_ that threads poll for tens of microseconds before they
  // block: a step's ops come back to back, and a futex wake per loop cost 5% of a decode step.
  std::atomic<uint64_t> posted_{0};
  std::atomic<int> running_{0};
};

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_THREAD_POOL_H_
