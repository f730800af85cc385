#include "gateway/key_limiter.h"

#include <algorithm>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gateway/api_keys.h"

namespace walsh {

const std::string& HttpCallToken() {
  static const std::string* token = [] {
    std::random_device rd;
    std::string t;
    for (int i = 0; i < 4; ++i) absl::StrAppend(&t, absl::Hex(rd(), absl::kZeroPad8));
    return new std::string(t);
  }();
  return *token;
}

KeyLimiter::KeyLimiter(int64_t max_streams_per_key, double rate, double burst)
    : max_streams_(max_streams_per_key), rate_(rate), burst_(std::max(1.0, burst)) {}

std::string KeyLimiter::KeyOf(const grpc::ServerContextBase& context, bool by_api_key,
                              const TrustedProxies& proxies) {
  const auto& md = context.client_metadata();
  if (by_api_key) {
    if (auto it = md.find("authorization"); it != md.end()) {
      return "key:" + std::string(it->second.data(), it->second.size());
    }
  }
  const std::string peer = context.peer();
  // The HTTP API calls in-process and names its client's address, which it resolved through
  // trusted proxies already. gRPC 1.51 gives in-process calls the peer "unknown", so the call
  // proves where it comes from with this process's secret instead.
  auto token = md.find(kHttpCallTokenHeader);
  if (token != md.end() &&
      ConstantTimeEquals(absl::string_view(token->second.data(), token->second.size()),
                         HttpCallToken())) {
    if (auto it = md.find(kHttpClientHeader); it != md.end()) {
      return "peer:http:" + std::string(it->second.data(), it->second.size());
    }
  }
  // The address without the port: one client, many connections.
  std::vector<std::string> forwarded;
  const auto range = md.equal_range("x-forwarded-for");
  for (auto it = range.first; it != range.second; ++it) {
    forwarded.emplace_back(it->second.data(), it->second.size());
  }
  return "peer:" + proxies.ClientAddress(GrpcPeerAddress(peer), forwarded);
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
