#include "gateway/client_key.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "common/api_keys.h"

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

std::vector<std::string> MetadataValues(const grpc::ServerContextBase& context, const char* name) {
  std::vector<std::string> values;
  const auto range = context.client_metadata().equal_range(name);
  for (auto it = range.first; it != range.second; ++it) {
    values.emplace_back(it->second.data(), it->second.size());
  }
  return values;
}

std::string ClientKeyOf(const grpc::ServerContextBase& context, bool by_api_key,
                        const TrustedProxies& proxies, int ipv6_prefix_bits) {
  const auto& md = context.client_metadata();
  if (by_api_key) {
    if (auto it = md.find("authorization"); it != md.end()) {
      return "key:" + PresentedKey(absl::string_view(it->second.data(), it->second.size()));
    }
  }
  // The HTTP API calls in-process and names its client's address, which it resolved through
  // trusted proxies already. gRPC 1.51 gives in-process calls the peer "unknown", so the call
  // proves where it comes from with this process's secret instead.
  auto token = md.find(kHttpCallTokenHeader);
  if (token != md.end() &&
      ConstantTimeEquals(absl::string_view(token->second.data(), token->second.size()),
                         HttpCallToken())) {
    if (auto it = md.find(kHttpClientHeader); it != md.end()) {
      return "peer:http:" +
             AddressGroup(std::string(it->second.data(), it->second.size()), ipv6_prefix_bits);
    }
  }
  // The address without the port: one client, many connections.
  return "peer:" + AddressGroup(proxies.ClientAddress(GrpcPeerAddress(context.peer()),
                                                      MetadataValues(context, "x-forwarded-for")),
                                ipv6_prefix_bits);
}

}  // namespace walsh
