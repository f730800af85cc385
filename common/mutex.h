// Mutex, MutexLock and CondVar with absl's names and clang thread-safety annotations, over
// std::mutex and std::condition_variable. Members guarded by a Mutex carry ABSL_GUARDED_BY and a
// clang build with -Wthread-safety (scripts/sanitize tsan) checks every access. Why not
// absl::Mutex itself: Debian's Abseil is not built for ThreadSanitizer, so TSan cannot see its
// synchronization, while it does see pthread mutexes.
#ifndef WALSH_COMMON_MUTEX_H_
#define WALSH_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/const_init.h"
#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace walsh {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  // For a static Mutex: ABSL_CONST_INIT static Mutex mu(absl::kConstInit);
  explicit constexpr Mutex(absl::ConstInitType) {}
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  // Releases `mu`, waits for a signal (or a spurious wake-up) and takes `mu` again.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    cv_.wait(l);
    l.release();
  }
  // As Wait, for at most `timeout`; true if it timed out (absl's meaning).
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    const bool timed_out =
        cv_.wait_for(l, absl::ToChronoNanoseconds(timeout)) == std::cv_status::timeout;
    l.release();
    return timed_out;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace walsh

#endif  // WALSH_COMMON_MUTEX_H_
