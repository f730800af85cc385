// Wall time per backend op, summed over the steps that ran while a profile was attached
// (EngineOptions::profile): the step profile `walsh-bench decode --profile` prints, so the share
// of a step that is not a ternary product can be read off one run. Off by default; attached, it
// costs one clock read per op.
#ifndef WALSH_WORKER_ENGINE_OP_PROFILE_H_
#define WALSH_WORKER_ENGINE_OP_PROFILE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace walsh {

class OpProfile {
 public:
  struct Entry {
    std::string op;
    int64_t calls = 0;
    double seconds = 0;
  };

  void Add(const char* op, std::chrono::nanoseconds elapsed);
  // Every op seen since the last Reset, the most time first.
  std::vector<Entry> Entries() const;
  void Reset();

 private:
  mutable absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// Adds the time from construction to destruction to `profile` under `op` (nothing if null).
class ScopedOpTime {
 public:
  ScopedOpTime(OpProfile* profile, const char* op)
      : profile_(profile),
        op_(op),
        start_(profile != nullptr ? std::chrono::steady_clock::now()
                                  : std::chrono::steady_clock::time_point{}) {}
  ~ScopedOpTime() {
    if (profile_ != nullptr) profile_->Add(op_, std::chrono::steady_clock::now() - start_);
  }
  ScopedOpTime(const ScopedOpTime&) = delete;
  ScopedOpTime& operator=(const ScopedOpTime&) = delete;

 private:
  OpProfile* profile_;
  const char* op_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_OP_PROFILE_H_
