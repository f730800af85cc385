#include "common/trusted_proxies.h"

#include "gtest/gtest.h"

namespace walsh {
namespace {

TrustedProxies Trust(const std::vector<std::string>& cidrs) {
  auto t = TrustedProxies::Parse(cidrs);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : TrustedProxies();
}

TEST(TrustedProxies, BlocksOfBothFamilies) {
  const TrustedProxies t = Trust({"10.0.0.0/8", "192.168.1.7", "fd00::/8", "::1"});
  EXPECT_TRUE(t.Trusts("10.255.0.1"));
  EXPECT_FALSE(t.Trusts("11.0.0.1"));
  EXPECT_TRUE(t.Trusts("192.168.1.7"));
  EXPECT_FALSE(t.Trusts("192.168.1.8"));
  EXPECT_TRUE(t.Trusts("fd12:3456::1"));
  EXPECT_FALSE(t.Trusts("fe80::1"));
  EXPECT_TRUE(t.Trusts("::1"));
  EXPECT_TRUE(t.Trusts("::ffff:10.1.2.3"));  // IPv4-mapped is IPv4
  EXPECT_TRUE(t.Trusts("[::1]"));
  EXPECT_FALSE(t.Trusts("not an address"));
  EXPECT_TRUE(Trust({"0.0.0.0/0"}).Trusts("8.8.8.8"));
  EXPECT_FALSE(Trust({"0.0.0.0/0"}).Trusts("2001:db8::1"));
  EXPECT_FALSE(TrustedProxies().Trusts("127.0.0.1"));
}

TEST(TrustedProxies, BadEntriesAreRefusedByName) {
  for (const char* bad :
       {"10.0.0.0/33", "fd00::/129", "10.0.0.0/-1", "10.0.0.0/x", "example.com", "", "10.0.0/8"}) {
    auto t = TrustedProxies::Parse({bad});
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.status().message().find(std::string("--trusted-proxy: \"") + bad + "\""),
              std::string::npos)
        << t.status();
  }
}

TEST(TrustedProxies, TheClientIsTheNearestUntrustedHop) {
  const TrustedProxies t = Trust({"10.0.0.0/8"});
  // An untrusted peer's header is anyone's to write: ignored.
  EXPECT_EQ(t.ClientAddress("203.0.113.1", {"198.51.100.9"}), "203.0.113.1");
  EXPECT_EQ(t.ClientAddress("10.0.0.1", {}), "10.0.0.1");
  EXPECT_EQ(t.ClientAddress("10.0.0.1", {"198.51.100.9"}), "198.51.100.9");
  // A client may prepend lies; the walk stops at the first hop no proxy of ours vouches for.
  EXPECT_EQ(t.ClientAddress("10.0.0.1", {"1.1.1.1, 198.51.100.9, 10.2.2.2"}), "198.51.100.9");
  EXPECT_EQ(t.ClientAddress("10.0.0.1", {"1.1.1.1", "198.51.100.9 , 10.2.2.2"}), "198.51.100.9");
  // All trusted: the farthest hop.
  EXPECT_EQ(t.ClientAddress("10.0.0.1", {"10.9.9.9, 10.2.2.2"}), "10.9.9.9");
  // A hop that is not an address ends the walk at the last address known.
  EXPECT_EQ(t.ClientAddress("10.0.0.1", {"<script>, 10.2.2.2"}), "10.2.2.2");
  EXPECT_EQ(t.ClientAddress("10.0.0.1", {"unknown"}), "10.0.0.1");
  EXPECT_EQ(t.ClientAddress("10.0.0.1", {"[2001:db8::7]"}), "2001:db8::7");
}

// Per-client limits count an IPv6 client by its network: every address of one /64 is one
// client; IPv4 addresses (mapped ones too) count alone.
TEST(TrustedProxies, AddressGroups) {
  EXPECT_EQ(AddressGroup("2001:db8:1:2:aaaa::1", 64), "2001:db8:1:2::/64");
  EXPECT_EQ(AddressGroup("2001:db8:1:2:ffff:ffff:ffff:ffff", 64), "2001:db8:1:2::/64");
  EXPECT_NE(AddressGroup("2001:db8:1:3::1", 64), AddressGroup("2001:db8:1:2::1", 64));
  EXPECT_EQ(AddressGroup("2001:db8:1:2::1", 48), "2001:db8:1::/48");
  EXPECT_EQ(AddressGroup("2001:db8::1", 128), "2001:db8::1");
  EXPECT_EQ(AddressGroup("10.1.2.3", 64), "10.1.2.3");
  EXPECT_EQ(AddressGroup("::ffff:10.1.2.3", 64), "10.1.2.3");
  EXPECT_EQ(AddressGroup("unknown", 64), "unknown");
}

TEST(TrustedProxies, GrpcPeerStrings) {
  EXPECT_EQ(GrpcPeerAddress("ipv4:10.1.2.3:5000"), "10.1.2.3");
  EXPECT_EQ(GrpcPeerAddress("ipv6:[::1]:5000"), "::1");
  EXPECT_EQ(GrpcPeerAddress("ipv6:%5B::1%5D:5000"), "::1");
  EXPECT_EQ(GrpcPeerAddress("unix:/tmp/s"), "unix:/tmp/s");
}

}  // namespace
}  // namespace walsh
