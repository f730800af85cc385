// The routing policies. Least-outstanding uses the power of two choices: two random workers,
// the one with fewer open streams wins (near-best balance without herding). The affinity
// policies hash onto a consistent ring of virtual nodes so a worker joining or leaving moves
// few keys, and bound the load: a worker more than 25% (+1) above the mean is skipped along
// the ring.
#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "gateway/routing/routing_policy.h"

namespace walsh {
namespace {

// Points per worker on the ring: enough that keys spread within a few percent of even.
constexpr int kRingPointsPerWorker = 64;
// A worker this far above the mean load (times, plus one stream) is passed over on the ring.
constexpr double kLoadBound = 1.25;

uint64_t Hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

class LeastOutstanding final : public RoutingPolicy {
 public:
  std::shared_ptr<WorkerEndpoint> Pick(const std::vector<std::shared_ptr<WorkerEndpoint>>& c,
                                       const RouteHint&) override {
    if (c.size() == 1) return c[0];
    thread_local std::mt19937_64 gen(std::random_device{}());
    const size_t a = gen() % c.size();
    size_t b = gen() % (c.size() - 1);
    if (b >= a) ++b;
    auto load = [](const WorkerEndpoint& w) { return w.outstanding.load() + w.waiting.load(); };
    return load(*c[b]) < load(*c[a]) ? c[b] : c[a];
  }
};

class RoundRobin final : public RoutingPolicy {
 public:
  std::shared_ptr<WorkerEndpoint> Pick(const std::vector<std::shared_ptr<WorkerEndpoint>>& c,
                                       const RouteHint&) override {
    return c[next_.fetch_add(1) % c.size()];
  }

 private:
  std::atomic<uint64_t> next_{0};
};

// Consistent hashing with bounded load, keyed by a hash the subclass chooses.
class ConsistentHash : public RoutingPolicy {
 public:
  std::shared_ptr<WorkerEndpoint> Pick(const std::vector<std::shared_ptr<WorkerEndpoint>>& c,
                                       const RouteHint& hint) override {
    const std::optional<uint64_t> key = Key(hint);
    if (!key) return nullptr;
    std::map<uint64_t, size_t> ring;
    for (size_t i = 0; i < c.size(); ++i) {
      for (int v = 0; v < kRingPointsPerWorker; ++v)
        ring[Hash(absl::StrCat(c[i]->address, "#", v))] = i;
    }
    int64_t total = 0;
    for (const auto& w : c) total += w->outstanding;
    const double bound =
        kLoadBound * static_cast<double>(total + 1) / static_cast<double>(c.size()) + 1;
    auto it = ring.lower_bound(*key);
    for (size_t steps = 0; steps < ring.size(); ++steps, ++it) {
      if (it == ring.end()) it = ring.begin();
      if (static_cast<double>(c[it->second]->outstanding.load()) < bound) return c[it->second];
    }
    return nullptr;
  }

 protected:
  virtual std::optional<uint64_t> Key(const RouteHint& hint) const = 0;
};

class PrefixAffinity final : public ConsistentHash {
  std::optional<uint64_t> Key(const RouteHint& hint) const override { return hint.prefix_hash; }
};

class SessionAffinity final : public ConsistentHash {
  std::optional<uint64_t> Key(const RouteHint& hint) const override {
    if (hint.session_key.empty()) return std::nullopt;
    return Hash(hint.session_key);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<RoutingPolicy>> MakeRoutingPolicy(const std::string& name) {
  if (name == "least-outstanding") return std::make_unique<LeastOutstanding>();
  if (name == "round-robin") return std::make_unique<RoundRobin>();
  if (name == "prefix-affinity") return std::make_unique<PrefixAffinity>();
  if (name == "session-affinity") return std::make_unique<SessionAffinity>();
  return absl::InvalidArgumentError(absl::StrCat(
      "--policy: \"", name,
      "\" is not least-outstanding, prefix-affinity, session-affinity or round-robin"));
}

}  // namespace walsh
