// Who a gRPC call to the gateway comes from, read from the call at the service's edge: the
// values per-client limits count against (gateway/key_limiter.h) and the API keys it presents
// (common/api_keys.h).
#ifndef WALSH_GATEWAY_CLIENT_KEY_H_
#define WALSH_GATEWAY_CLIENT_KEY_H_

#include <string>
#include <vector>

#include "common/trusted_proxies.h"
#include "grpcpp/grpcpp.h"

namespace walsh {

// Metadata of the HTTP API's in-process calls: its client's address, and this process's
// random token that proves the call is the HTTP API's (a remote caller cannot know it).
inline constexpr char kHttpClientHeader[] = "x-walsh-http-client";
inline constexpr char kHttpCallTokenHeader[] = "x-walsh-http-token";
const std::string& HttpCallToken();

// Every value of the call's metadata `name` (lower case), in order.
std::vector<std::string> MetadataValues(const grpc::ServerContextBase& context, const char* name);

// The key a call counts against: its API key when `by_api_key` (as presented, whatever the
// spelling of its header), else its client's address group (AddressGroup: behind a trusted
// proxy, the address X-Forwarded-For names; for the HTTP API's calls, the address the HTTP face
// resolved).
std::string ClientKeyOf(const grpc::ServerContextBase& context, bool by_api_key,
                        const TrustedProxies& proxies, int ipv6_prefix_bits);

}  // namespace walsh

#endif  // WALSH_GATEWAY_CLIENT_KEY_H_
