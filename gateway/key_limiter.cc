#include "gateway/key_limiter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

// Pruning runs when the table reaches twice what the last one left (at least this many), so
// its cost per admission stays constant.
constexpr size_t kFirstPrune = 1024;

}  // namespace

KeyLimiter::KeyLimiter(int64_t max_streams_per_key, double rate, double burst, Clock clock,
                       int64_t max_clients)
    : max_streams_(max_streams_per_key),
      rate_(rate),
      burst_(std::max(1.0, burst)),
      clock_(std::move(clock)),
      max_clients_(std::max<int64_t>(max_clients, 1)),
      prune_at_(std::min<size_t>(kFirstPrune, static_cast<size_t>(max_clients_))) {}

void KeyLimiter::PruneLocked() {
  const auto now = clock_();
  auto as_new = [&](const PerKey& k) {
    if (k.streams > 0) return false;
    if (rate_ <= 0 || k.refilled == std::chrono::steady_clock::time_point{}) return true;
    return k.tokens + rate_ * std::chrono::duration<double>(now - k.refilled).count() >= burst_;
  };
  for (auto it = keys_.begin(); it != keys_.end();) {
    auto here = it++;  // flat_hash_map's erase leaves the other iterators valid
    if (as_new(here->second)) keys_.erase(here);
  }
  prune_at_ = std::min(std::max(kFirstPrune, 2 * keys_.size()), static_cast<size_t>(max_clients_));
}

KeyLimiter::PerKey* KeyLimiter::FindOrAddLocked(const std::string& key, absl::Status& refused) {
  if (auto it = keys_.find(key); it != keys_.end()) return &it->second;
  if (keys_.size() >= prune_at_ && clock_() >= no_prune_before_) {
    PruneLocked();
    if (static_cast<int64_t>(keys_.size()) >= max_clients_) {
      no_prune_before_ =
          clock_() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(rate_ > 0 ? std::min(1.0, 1 / rate_) : 1.0));
    }
  }
  if (static_cast<int64_t>(keys_.size()) >= max_clients_) {
    refused = absl::ResourceExhaustedError(
        absl::StrCat("the gateway tracks at most ", max_clients_,
                     " clients' limits at once, all busy (--rate-limit-max-clients)"));
    return nullptr;
  }
  return &keys_[key];
}

absl::Status KeyLimiter::TakeTokenLocked(PerKey& k) {
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
  absl::Status refused;
  PerKey* k = FindOrAddLocked(key, refused);
  return k == nullptr ? refused : TakeTokenLocked(*k);
}

absl::Status KeyLimiter::AdmitStream(const std::string& key, std::shared_ptr<void>* slot) {
  MutexLock l(&mu_);
  absl::Status refused;
  PerKey* k = FindOrAddLocked(key, refused);
  if (k == nullptr) return refused;
  if (max_streams_ > 0 && k->streams >= max_streams_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "at most ", max_streams_, " concurrent streams per client (--max-streams-per-key)"));
  }
  if (absl::Status s = TakeTokenLocked(*k); !s.ok()) return s;
  ++k->streams;
  // An entry with a stream is never pruned, so it is there when the slot comes back.
  *slot = std::shared_ptr<void>(nullptr, [this, key](void*) {
    MutexLock l(&mu_);
    if (auto it = keys_.find(key); it != keys_.end()) --it->second.streams;
  });
  return absl::OkStatus();
}

int64_t KeyLimiter::tracked() const {
  MutexLock l(&mu_);
  return static_cast<int64_t>(keys_.size());
}

}  // namespace walsh
