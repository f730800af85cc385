// Where requests are prepared before the scheduler sees them: prompts tokenized, constraints
// compiled, on a few threads of the pool's own with a bounded queue. The gRPC threads only
// parse and hand over, so a burst of 3 MiB prompts cannot delay a health check (the gateway
// gives a worker 500 ms to answer one before it stops routing to it).
#ifndef WALSH_WORKER_SERVER_PREPARE_POOL_H_
#define WALSH_WORKER_SERVER_PREPARE_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"

namespace walsh {

class PreparePool {
 public:
  PreparePool(int threads, size_t max_queued);
  ~PreparePool();  // Shutdown()
  PreparePool(const PreparePool&) = delete;
  PreparePool& operator=(const PreparePool&) = delete;

  // A job runs once: `shutting_down` true when Shutdown came first (it should only answer).
  using Job = std::function<void(bool shutting_down)>;
  // False (and `job` not run) when max_queued jobs wait already, or after Shutdown.
  bool TrySubmit(Job job) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes no more jobs, runs those queued as shutting down (they answer at once), and joins the
  // threads.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  size_t queued() const ABSL_LOCKS_EXCLUDED(mu_);
  // Why TrySubmit said no: UNAVAILABLE after Shutdown, else RESOURCE_EXHAUSTED naming the bound.
  absl::Status Refusal() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const size_t max_queued_;
  mutable Mutex mu_;
  CondVar ready_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_PREPARE_POOL_H_
