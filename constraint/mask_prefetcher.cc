#include "constraint/mask_prefetcher.h"

#include <algorithm>

namespace walsh {

bool MaskJob::Claim() {
  MutexLock lock(&mu_);
  if (state_ != State::kQueued) return false;
  state_ = State::kRunning;
  return true;
}

void MaskJob::Compute() {
  std::vector<uint64_t> bits;
  MaskBudget budget(limits_, cancelled_, &abandoned_);
  absl::Status status = matcher_->FillMask(bits, budget);
  {
    MutexLock lock(&mu_);
    bits_ = std::move(bits);
    status_ = std::move(status);
    state_ = State::kDone;
    done_.SignalAll();
  }
  if (on_done_) on_done_();
}

void MaskJob::Run() {
  if (Claim()) Compute();
}

bool MaskJob::Ready() const {
  MutexLock lock(&mu_);
  return state_ == State::kDone;
}

absl::StatusOr<std::vector<uint64_t>> MaskJob::Take() {
  if (Claim()) Compute();
  MutexLock lock(&mu_);
  while (state_ == State::kRunning) done_.Wait(&mu_);
  state_ = State::kCancelled;  // taken: a pool thread that dequeues it now skips it
  if (!status_.ok()) return status_;
  return std::move(bits_);
}

void MaskJob::Cancel() {
  abandoned_.store(true, std::memory_order_relaxed);
  MutexLock lock(&mu_);
  while (state_ == State::kRunning) done_.Wait(&mu_);
  state_ = State::kCancelled;
}

MaskPrefetcher::MaskPrefetcher(int threads, const MaskLimits& warm_limits)
    : warm_limits_(warm_limits) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Loop(); });
}

MaskPrefetcher::~MaskPrefetcher() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    wake_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

std::shared_ptr<MaskJob> MaskPrefetcher::Start(const GrammarMatcher* matcher,
                                               const MaskLimits& limits,
                                               const std::atomic<bool>* cancelled,
                                               std::function<void()> on_done) {
  auto job = std::make_shared<MaskJob>(matcher, limits, cancelled, std::move(on_done));
  MutexLock lock(&mu_);
  queue_.push_back(job);
  wake_.Signal();
  return job;
}

void MaskPrefetcher::Warm(std::weak_ptr<const CompiledGrammar> grammar) {
  MutexLock lock(&mu_);
  warming_.push_back(std::move(grammar));
  wake_.Signal();
}

void MaskPrefetcher::Loop() {
  while (true) {
    std::shared_ptr<MaskJob> job;
    std::shared_ptr<const CompiledGrammar> grammar;
    {
      MutexLock lock(&mu_);
      while (!stop_ && queue_.empty() && warming_.empty()) wake_.Wait(&mu_);
      if (stop_) return;
      if (!queue_.empty()) {
        job = std::move(queue_.front());
        queue_.pop_front();
      } else {
        grammar = warming_.front().lock();
        warming_.pop_front();
      }
    }
    if (job != nullptr) {
      job->Run();
    } else if (grammar != nullptr && grammar->WarmNext(warm_limits_)) {
      MutexLock lock(&mu_);
      warming_.push_back(grammar);  // behind the other grammars warming, round robin
    }
  }
}

}  // namespace walsh
