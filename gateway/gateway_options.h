// What an operator sets about the gateway's Generate streams (gateway/main.cc maps the flags).
#ifndef WALSH_GATEWAY_GATEWAY_OPTIONS_H_
#define WALSH_GATEWAY_GATEWAY_OPTIONS_H_

#include <chrono>
#include <cstdint>

#include "common/api_keys.h"
#include "common/stream_writer.h"
#include "common/trusted_proxies.h"
#include "gateway/key_limiter.h"

namespace walsh {

struct GatewayOptions {
  int64_t max_inflight = 256;             // streams proxied at once
  int64_t max_queue = 256;                // streams waiting for a slot; beyond: RESOURCE_EXHAUSTED
  int max_retries = 3;                    // before the first token
  int max_migrations = 5;                 // after it
  std::chrono::milliseconds backoff{25};  // base of the jittered exponential backoff
  // Rounds over every worker (each failed the stream once) before it fails.
  int retry_rounds = 5;
  // A stream with no routable worker waits this long for one, at most max_worker_waits times.
  std::chrono::milliseconds worker_wait{2000};
  int max_worker_waits = 3;
  // Deadline of the unary calls forwarded to a worker (GetModelInfo, Tokenize, Detokenize).
  std::chrono::milliseconds unary_timeout{10000};
  const ApiKeys* api_keys = nullptr;  // if set and enabled: every call needs a key
  KeyLimiter* limiter = nullptr;      // if set: per-client stream and rate limits
  TrustedProxies trusted_proxies;     // peers whose X-Forwarded-For names the client
  int ipv6_prefix_bits = 64;          // IPv6 clients count per network of this size
  // What a stream may hold for a client that does not read, and the process's total (its budget
  // refuses new streams once reached).
  StreamBufferLimits stream_buffers;
};

}  // namespace walsh

#endif  // WALSH_GATEWAY_GATEWAY_OPTIONS_H_
