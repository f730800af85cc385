#include "common/trusted_proxies.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace walsh {
namespace {

// An IPv4 or IPv6 address as 16 bytes (IPv4 as ::ffff:a.b.c.d), and whether it was IPv4.
struct Address {
  std::array<uint8_t, 16> bytes{};
  bool v4 = false;
};

std::optional<Address> ParseAddress(absl::string_view text) {
  std::string s(absl::StripAsciiWhitespace(text));
  if (s.size() > 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  Address a;
  in_addr v4;
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    a.bytes[10] = a.bytes[11] = 0xff;
    std::memcpy(&a.bytes[12], &v4, 4);
    a.v4 = true;
    return a;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, s.c_str(), &v6) == 1) {
    std::memcpy(a.bytes.data(), &v6, 16);
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    a.v4 = std::memcmp(a.bytes.data(), kMapped, 12) == 0;
    return a;
  }
  return std::nullopt;
}

std::string Format(const Address& a) {
  char buf[INET6_ADDRSTRLEN];
  if (a.v4) return inet_ntop(AF_INET, &a.bytes[12], buf, sizeof buf);
  return inet_ntop(AF_INET6, a.bytes.data(), buf, sizeof buf);
}

// The mask of byte i of a /bits prefix.
uint8_t PrefixByteMask(int i, int bits) {
  const int left = bits - 8 * i;
  return left >= 8 ? 0xff : left <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - left));
}

bool InBlock(const std::array<uint8_t, 16>& bytes, const std::array<uint8_t, 16>& prefix,
             int bits) {
  for (int i = 0; i < 16; ++i) {
    const uint8_t mask = PrefixByteMask(i, bits);
    if ((bytes[i] & mask) != (prefix[i] & mask)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<TrustedProxies> TrustedProxies::Parse(const std::vector<std::string>& cidrs) {
  TrustedProxies t;
  for (const std::string& entry : cidrs) {
    auto bad = [&](const char* why) {
      return absl::InvalidArgumentError(absl::StrCat("--trusted-proxy: \"", entry, "\" ", why));
    };
    const std::vector<std::string> parts = absl::StrSplit(entry, absl::MaxSplits('/', 1));
    const std::optional<Address> a = ParseAddress(parts[0]);
    if (!a) return bad("is not an IPv4 or IPv6 address or CIDR block");
    int bits = a->v4 ? 32 : 128;
    if (parts.size() == 2) {
      int given = -1;
      if (!absl::SimpleAtoi(parts[1], &given) || given < 0 || given > bits) {
        return bad(a->v4 ? "has a prefix length outside [0, 32]"
                         : "has a prefix length outside [0, 128]");
      }
      bits = given;
    }
    Block b;
    b.prefix = a->bytes;
    b.bits = a->v4 ? 96 + bits : bits;
    t.blocks_.push_back(b);
  }
  return t;
}

bool TrustedProxies::Trusts(const std::string& address) const {
  const std::optional<Address> a = ParseAddress(address);
  if (!a) return false;
  for (const Block& b : blocks_) {
    if (InBlock(a->bytes, b.prefix, b.bits)) return true;
  }
  return false;
}

std::string TrustedProxies::ClientAddress(const std::string& peer,
                                          const std::vector<std::string>& forwarded_for) const {
  if (!Trusts(peer)) return peer;
  std::vector<std::string> hops;
  for (const std::string& value : forwarded_for) {
    for (absl::string_view hop : absl::StrSplit(value, ',')) hops.emplace_back(hop);
  }
  // Walk from the nearest hop; stop at the first untrusted one. A hop that is not an address
  // ends the walk at the last address known (never a string a client chose).
  std::string client = peer;
  for (auto it = hops.rbegin(); it != hops.rend(); ++it) {
    const std::optional<Address> a = ParseAddress(*it);
    if (!a) break;
    client = Format(*a);
    if (!Trusts(client)) break;
  }
  return client;
}

std::string AddressGroup(const std::string& address, int ipv6_prefix_bits) {
  std::optional<Address> a = ParseAddress(address);
  if (!a) return address;
  if (a->v4 || ipv6_prefix_bits >= 128) return Format(*a);
  for (int i = 0; i < 16; ++i) a->bytes[i] &= PrefixByteMask(i, ipv6_prefix_bits);
  return absl::StrCat(Format(*a), "/", ipv6_prefix_bits);
}

std::string GrpcPeerAddress(const std::string& peer) {
  absl::string_view p = peer;
  if (!absl::ConsumePrefix(&p, "ipv4:") && !absl::ConsumePrefix(&p, "ipv6:")) return peer;
  const size_t colon = p.rfind(':');
  if (colon != absl::string_view::npos) p = p.substr(0, colon);
  if (p.size() > 2 && p.front() == '[' && p.back() == ']') p = p.substr(1, p.size() - 2);
  if (absl::ConsumePrefix(&p, "%5B")) absl::ConsumeSuffix(&p, "%5D");  // URI-escaped brackets
  return std::string(p);
}

}  // namespace walsh
