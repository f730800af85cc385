#include "gateway/key_limiter.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace walsh {

KeyLimiter::KeyLimiter(int64_t max_streams_per_key, double rate, double burst)
    : max_streams_(max_streams_per_key), rate_(rate), burst_(std::max(1.0, burst)) {}

std::string KeyLimiter::KeyOf(const grpc::ServerContextBase& context, bool by_api_key) {
  if (by_api_key) {
    const auto& md = context.client_metadata();
    if (auto it = md.find("authorization"); it != md.end()) {
      return "key:" + std::string(it->second.data(), it->second.size());
    }
  }
  // "ipv4:127.0.0.1:54321" -> the address without the port: one client, many connections.
  const std::string peer = context.peer();
  // The HTTP API calls in-process (no remote client can) and names its client's address.
  if (absl::StartsWith(peer, "inproc")) {
    const auto& md = context.client_metadata();
    if (auto it = md.find("x-walsh-http-client"); it != md.end()) {
      return "peer:http:" + std::string(it->second.data(), it->second.size());
    }
  }
  const size_t colon = peer.rfind(':');
  return "peer:" + (colon == std::string::npos ? peer : peer.substr(0, colon));
}

grpc::Status KeyLimiter::TakeTokenLocked(const std::string& key, PerKey& k) {
  (void)key;
  if (rate_ <= 0) return grpc::Status::OK;
  const auto now = std::chrono::steady_clock::now();
  if (k.refilled == std::chrono::steady_clock::time_point{}) {
    k.tokens = burst_;
  } else {
    k.tokens = std::min(burst_,
                        k.tokens + rate_ * std::chrono::duration<double>(now - k.refilled).count());
  }
  k.refilled = now;
  if (k.tokens < 1.0) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("rate limit: at most ", rate_,
                                     " requests per second per client (--rate-limit)"));
  }
  k.tokens -= 1.0;
  return grpc::Status::OK;
}

grpc::Status KeyLimiter::AdmitCall(const std::string& key) {
  MutexLock l(&mu_);
  return TakeTokenLocked(key, keys_[key]);
}

grpc::Status KeyLimiter::AdmitStream(const std::string& key, std::shared_ptr<void>* slot) {
  MutexLock l(&mu_);
  PerKey& k = keys_[key];
  if (max_streams_ > 0 && k.streams >= max_streams_) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("at most ", max_streams_,
                                     " concurrent streams per client (--max-streams-per-key)"));
  }
  if (grpc::Status s = TakeTokenLocked(key, k); !s.ok()) return s;
  ++k.streams;
  *slot = std::shared_ptr<void>(nullptr, [this, key](void*) {
    MutexLock l(&mu_);
    --keys_[key].streams;
  });
  return grpc::Status::OK;
}

}  // namespace walsh
