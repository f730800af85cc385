#include "worker/server/prepare_pool.h"

#include "absl/strings/str_cat.h"

namespace walsh {

PreparePool::PreparePool(int threads, size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

PreparePool::~PreparePool() { Shutdown(); }

bool PreparePool::TrySubmit(Job job) {
  MutexLock l(&mu_);
  if (stopping_ || jobs_.size() >= max_queued_) return false;
  jobs_.push_back(std::move(job));
  ready_.Signal();
  return true;
}

void PreparePool::Shutdown() {
  {
    MutexLock l(&mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    ready_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

size_t PreparePool::queued() const {
  MutexLock l(&mu_);
  return jobs_.size();
}

absl::Status PreparePool::Refusal() const {
  MutexLock l(&mu_);
  if (stopping_) return absl::UnavailableError("the worker is shutting down");
  return absl::ResourceExhaustedError(absl::StrCat("the worker is already preparing ", jobs_.size(),
                                                   " requests (--max-running + --max-queue)"));
}

void PreparePool::Loop() {
  for (;;) {
    Job job;
    bool shutting_down;
    {
      MutexLock l(&mu_);
      while (jobs_.empty() && !stopping_) ready_.Wait(&mu_);
      if (jobs_.empty()) return;  // stopping, and nothing left to run
      job = std::move(jobs_.front());
      jobs_.pop_front();
      shutting_down = stopping_;
    }
    job(shutting_down);
  }
}

}  // namespace walsh
