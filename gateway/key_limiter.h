// Per-client limits at the gateway, so one client cannot fill it: concurrent streams per key
// (--max-streams-per-key) and a request-rate token bucket per key (--rate-limit, --rate-burst),
// taken by Generate, Tokenize and Detokenize (not GetModelInfo). The key is the client's API key
// when keys are required, else its address group (gateway/client_key.h). Over a limit a call
// gets RESOURCE_EXHAUSTED naming the flag. Memory stays bounded whatever clients come: a client
// with no stream and a full bucket is the same as one never seen, so such entries are dropped as
// the table grows, and past
// --rate-limit-max-clients tracked at once a new client is refused, naming the flag.
#ifndef WALSH_GATEWAY_KEY_LIMITER_H_
#define WALSH_GATEWAY_KEY_LIMITER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/mutex.h"

namespace walsh {

class KeyLimiter {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  static constexpr int64_t kDefaultMaxClients = 65'536;

  // 0 turns a limit off. rate: requests per second; burst: the bucket's size (>= 1).
  // max_clients: the clients tracked at once (>= 1). `clock` refills the buckets (tests pass a
  // fake one).
  KeyLimiter(int64_t max_streams_per_key, double rate, double burst,
             Clock clock = std::chrono::steady_clock::now,
             int64_t max_clients = kDefaultMaxClients);

  // One request of `key` that takes no stream slot: OK, or RESOURCE_EXHAUSTED when its bucket
  // is empty or the table is full.
  absl::Status AdmitCall(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // A stream of `key`: a rate token and a stream slot, held until the returned handle is
  // destroyed; or RESOURCE_EXHAUSTED.
  absl::Status AdmitStream(const std::string& key, std::shared_ptr<void>* slot)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Clients tracked now (for tests and the gauge).
  int64_t tracked() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct PerKey {
    int64_t streams = 0;
    double tokens = 0;
    std::chrono::steady_clock::time_point refilled;
  };
  // `key`'s entry, added if new; null (and `refused` set) when the table is full.
  PerKey* FindOrAddLocked(const std::string& key, absl::Status& refused)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the entries indistinguishable from new ones: no stream, and a full bucket by now.
  void PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status TakeTokenLocked(PerKey& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_streams_;
  const double rate_, burst_;
  const Clock clock_;
  const int64_t max_clients_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, PerKey> keys_ ABSL_GUARDED_BY(mu_);
  size_t prune_at_ ABSL_GUARDED_BY(mu_);  // the size at which the next prune runs
  // A full table that a prune could not shrink is not scanned again before this (one token's
  // refill): new clients meanwhile are refused at the cost of a lookup.
  std::chrono::steady_clock::time_point no_prune_before_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walsh

#endif  // WALSH_GATEWAY_KEY_LIMITER_H_
