#include "worker/constraint/mask_prefetcher.h"

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
  matcher_->FillMask(bits);
  MutexLock lock(&mu_);
  bits_ = std::move(bits);
  state_ = State::kDone;
  done_.SignalAll();
}

void MaskJob::Run() {
  if (Claim()) Compute();
}

std::vector<uint64_t> MaskJob::Take() {
  if (Claim()) Compute();
  MutexLock lock(&mu_);
  while (state_ == State::kRunning) done_.Wait(&mu_);
  state_ = State::kCancelled;  // taken: a pool thread that dequeues it now skips it
  return std::move(bits_);
}

void MaskJob::Cancel() {
  MutexLock lock(&mu_);
  while (state_ == State::kRunning) done_.Wait(&mu_);
  state_ = State::kCancelled;
}

MaskPrefetcher::MaskPrefetcher(int threads) {
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

std::shared_ptr<MaskJob> MaskPrefetcher::Start(const GrammarMatcher* matcher) {
  auto job = std::make_shared<MaskJob>(matcher);
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
    } else if (grammar != nullptr && grammar->WarmNext()) {
      MutexLock lock(&mu_);
      warming_.push_back(grammar);  // behind the other grammars warming, round robin
    }
  }
}

}  // namespace walsh
