// The prefix-affinity key: requests that could share a worker's prefix cache get the same key,
// so prefix-affinity routing sends them to the same worker. A worker snapshots only prefixes of
// at least its --prefix-cache-min-tokens (docs/prefix_caching.md), so two requests can reuse
// each other's work only if they share that many tokens; the key covers `window` tokens (that
// minimum, in whole KV pages, as the workers report it in ModelInfo) and nothing after them.
// The gateway does not tokenize: text and chat requests are keyed on their first `window` bytes,
// which any two prompts sharing `window` tokens also share (a token is at least one byte).
#ifndef WALSH_GATEWAY_ROUTING_PREFIX_KEY_H_
#define WALSH_GATEWAY_ROUTING_PREFIX_KEY_H_

#include <cstdint>

#include "walsh/v1/generator.pb.h"

namespace walsh {

// Tokens the key covers when no worker has said (caching off, or not polled yet).
inline constexpr int64_t kDefaultAffinityWindow = 64;

// The window for workers with this page size and snapshot minimum (0: caching off).
int64_t AffinityWindow(int64_t page_size, int64_t min_tokens);

// FNV-1a over the request's first `window` tokens (or bytes).
uint64_t PrefixAffinityKey(const v1::GenerateRequest& request, int64_t window);

}  // namespace walsh

#endif  // WALSH_GATEWAY_ROUTING_PREFIX_KEY_H_
