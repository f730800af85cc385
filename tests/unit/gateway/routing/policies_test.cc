// The routing policies over in-process worker endpoints (their channels never connect: a
// policy only reads addresses and counters).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gateway/routing/routing_policy.h"
#include "gtest/gtest.h"

namespace walsh {
namespace {

using Workers = std::vector<std::shared_ptr<WorkerEndpoint>>;

Workers MakeWorkers(int n) {
  Workers w;
  for (int i = 0; i < n; ++i) {
    w.push_back(std::make_shared<WorkerEndpoint>(absl::StrCat("10.0.0.", i + 1, ":7000"),
                                                 WorkerChannelOptions{}));
  }
  return w;
}

// A policy every test needs: no test can go on without it.
std::unique_ptr<RoutingPolicy> Policy(const std::string& name) {
  auto p = MakeRoutingPolicy(name);
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", std::string(p.status().message()).c_str());
    std::abort();
  }
  return std::move(*p);
}

TEST(MakeRoutingPolicy, RefusesAnUnknownNameNamingTheFlag) {
  auto p = MakeRoutingPolicy("fastest");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("--policy: \"fastest\""), absl::string_view::npos);
}

TEST(RoundRobin, VisitsEveryWorkerInTurn) {
  Workers w = MakeWorkers(3);
  auto policy = Policy("round-robin");
  std::vector<std::string> picked;
  for (int i = 0; i < 6; ++i) picked.push_back(policy->Pick(w, {})->address);
  EXPECT_EQ(picked[0], picked[3]);
  EXPECT_EQ(std::set<std::string>(picked.begin(), picked.begin() + 3).size(), 3u);
}

TEST(LeastOutstanding, OfTwoWorkersAlwaysTheLessLoaded) {
  Workers w = MakeWorkers(2);
  w[0]->outstanding = 5;
  w[1]->outstanding = 1;
  auto policy = Policy("least-outstanding");
  for (int i = 0; i < 50; ++i) EXPECT_EQ(policy->Pick(w, {}), w[1]);
  w[1]->waiting = 10;  // queued at the worker counts as load too
  for (int i = 0; i < 50; ++i) EXPECT_EQ(policy->Pick(w, {}), w[0]);
}

TEST(LeastOutstanding, NeverPicksTheMostLoadedOfMany) {
  Workers w = MakeWorkers(5);
  for (int i = 0; i < 5; ++i) w[i]->outstanding = i;  // w[4] loses every pair it is in
  auto policy = Policy("least-outstanding");
  for (int i = 0; i < 200; ++i) EXPECT_NE(policy->Pick(w, {}), w[4]);
}

TEST(PrefixAffinity, TheSamePrefixGoesToTheSameWorker) {
  Workers w = MakeWorkers(4);
  auto policy = Policy("prefix-affinity");
  std::set<std::string> used;
  for (uint64_t key = 0; key < 64; ++key) {
    const RouteHint hint{.prefix_hash = key * 0x9e3779b97f4a7c15ull};
    auto first = policy->Pick(w, hint);
    ASSERT_NE(first, nullptr);
    used.insert(first->address);
    EXPECT_EQ(policy->Pick(w, hint), first);
  }
  EXPECT_EQ(used.size(), 4u);  // and the keys spread over every worker
}

TEST(PrefixAffinity, AWorkerLeavingMovesOnlyItsOwnKeys) {
  Workers w = MakeWorkers(4);
  auto policy = Policy("prefix-affinity");
  std::map<uint64_t, std::string> before;
  for (uint64_t key = 0; key < 200; ++key) {
    before[key] = policy->Pick(w, {.prefix_hash = key * 0x9e3779b97f4a7c15ull})->address;
  }
  const std::string gone = w[2]->address;
  w.erase(w.begin() + 2);
  for (const auto& [key, address] : before) {
    const std::string now = policy->Pick(w, {.prefix_hash = key * 0x9e3779b97f4a7c15ull})->address;
    if (address != gone) {
      EXPECT_EQ(now, address) << key;
    }
  }
}

TEST(PrefixAffinity, AnOverloadedWorkerIsPassedOver) {
  Workers w = MakeWorkers(3);
  auto policy = Policy("prefix-affinity");
  const RouteHint hint{.prefix_hash = 12345};
  auto home = policy->Pick(w, hint);
  home->outstanding = 30;  // far above the mean: 1.25 * 31 / 3 + 1 is about 13.9
  auto other = policy->Pick(w, hint);
  EXPECT_NE(other, home);
  home->outstanding = 0;
  EXPECT_EQ(policy->Pick(w, hint), home);
}

TEST(SessionAffinity, NoSessionKeyLeavesTheChoiceToTheDefault) {
  Workers w = MakeWorkers(3);
  auto policy = Policy("session-affinity");
  EXPECT_EQ(policy->Pick(w, {}), nullptr);
  auto a = policy->Pick(w, {.session_key = "user-17"});
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(policy->Pick(w, {.session_key = "user-17"}), a);
}

}  // namespace
}  // namespace walsh
