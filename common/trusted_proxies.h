// Which peers may say who the client is (--trusted-proxy): an ingress or load balancer in front
// of the gateway is every request's peer, so per-client limits and logs would see only it. When
// the peer is trusted, X-Forwarded-For is read from its right end (the hop nearest the gateway)
// and the client is the first address that is not a trusted proxy; an untrusted peer's header is
// ignored, since anyone can write one.
#ifndef WALSH_COMMON_TRUSTED_PROXIES_H_
#define WALSH_COMMON_TRUSTED_PROXIES_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace walsh {

class TrustedProxies {
 public:
  TrustedProxies() = default;  // trusts no one
  // Each entry a CIDR block ("10.0.0.0/8", "fd00::/8") or one address; an error names the
  // flag and the entry.
  static absl::StatusOr<TrustedProxies> Parse(const std::vector<std::string>& cidrs);

  bool empty() const { return blocks_.empty(); }
  bool Trusts(const std::string& address) const;
  // The client behind `peer` (an address without a port), given the request's X-Forwarded-For
  // values in order (each a comma-separated list).
  std::string ClientAddress(const std::string& peer,
                            const std::vector<std::string>& forwarded_for) const;

 private:
  struct Block {
    std::array<uint8_t, 16> prefix{};  // IPv4 as IPv4-mapped IPv6
    int bits = 0;                      // of the 128
  };
  std::vector<Block> blocks_;
};

// The group of clients an address counts in for per-client limits: an IPv4 address alone, an
// IPv6 one by its first `ipv6_prefix_bits` bits, as a CIDR block ("2001:db8:1:2::/64"), since
// one subscriber holds a whole /64 and could otherwise count as 2^64 clients. Text that is not
// an address comes back as it is.
std::string AddressGroup(const std::string& address, int ipv6_prefix_bits);

// The address part of a gRPC peer string ("ipv4:10.1.2.3:5000" -> "10.1.2.3",
// "ipv6:[::1]:5000" -> "::1"); other peers as they are.
std::string GrpcPeerAddress(const std::string& peer);

}  // namespace walsh

#endif  // WALSH_COMMON_TRUSTED_PROXIES_H_
