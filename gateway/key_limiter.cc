#include "gateway/key_limiter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace walsh {

KeyLimiter::KeyLimiter(int64_t max_streams_per_key, double rate, double burst, Clock clock)
    : max_streams_(max_streams_per_key),
      rate_(rate),
      burst_(std::max(1.0, burst)),
      clock_(std::move(clock)) {}

absl::Status KeyLimiter::TakeTokenLocked(const std::string& key, PerKey& k) {
  (void)key;
  if (rate_ <= 0) return absl::OkStatus();
  const auto now = clock_();
  if (k.refilled == std::chrono::steady_clock::time_point{}) {
    k.tokens = burst_;
  } else {
    k.tokens = std::min(burst_,
                        k.tokens + rate_ * std::chrono::duration<double>(now - k.refilled).count());
  }
  k.refilled = now;
  if (k.tokens < 1.0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rate limit: at most ", rate_, " requests per second per client (--rate-limit)"));
  }
  k.tokens -= 1.0;
  return absl::OkStatus();
}

absl::Status KeyLimiter::AdmitCall(const std::string& key) {
  MutexLock l(&mu_);
  return TakeTokenLocked(key, keys_[key]);
}

absl::Status KeyLimiter::AdmitStream(const std::string& key, std::shared_ptr<void>* slot) {
  MutexLock l(&mu_);
  PerKey& k = keys_[key];
  if (max_streams_ > 0 && k.streams >= max_streams_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "at most ", max_streams_, " concurrent streams per client (--max-streams-per-key)"));
  }
  if (absl::Status s = TakeTokenLocked(key, k); !s.ok()) return s;
  ++k.streams;
  *slot = std::shared_ptr<void>(nullptr, [this, key](void*) {
    MutexLock l(&mu_);
    --keys_[key].streams;
  });
  return absl::OkStatus();
}

}  // namespace walsh
