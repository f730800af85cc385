// How the gateway picks a worker for a request. A policy sees the routable workers (stable
// order) and a hint; it must be cheap and thread-safe (called from every stream's thread).
#ifndef WALSH_GATEWAY_ROUTING_ROUTING_POLICY_H_
#define WALSH_GATEWAY_ROUTING_ROUTING_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gateway/worker_pool.h"

namespace walsh {

struct RouteHint {
  uint64_t prefix_hash = 0;  // hash of the prompt's beginning (prefix affinity)
  std::string session_key;   // x-walsh-session metadata (session affinity); may be empty
};

class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;
  // One of `candidates` (never empty), or null to use the default choice.
  virtual std::shared_ptr<WorkerEndpoint> Pick(
      const std::vector<std::shared_ptr<WorkerEndpoint>>& candidates, const RouteHint& hint) = 0;
};

// "least-outstanding" (default; power of two choices), "prefix-affinity", "session-affinity",
// "round-robin".
absl::StatusOr<std::unique_ptr<RoutingPolicy>> MakeRoutingPolicy(const std::string& name);

}  // namespace walsh

#endif  // WALSH_GATEWAY_ROUTING_ROUTING_POLICY_H_
