// walsh-worker as a follower of a tensor-parallel group that spans processes (--node-rank 1..):
// it loads the model, joins the leader's group (rank_group.h), holds its rank's shard and runs
// the steps the leader plans (worker/engine/rank_follower.h) until the leader closes the group.
// It serves no requests: clients and the gateway see only the leader. It exports its process
// metrics and walsh_follower_* on --metrics-listen.
#ifndef WALSH_WORKER_SERVER_FOLLOWER_SERVER_H_
#define WALSH_WORKER_SERVER_FOLLOWER_SERVER_H_

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "common/metrics_http_server.h"
#include "worker/engine/rank_follower.h"
#include "worker/server/worker_server.h"

namespace walsh {

class FollowerServer {
 public:
  // Loads, joins and allocates nothing yet (the leader sends the caches' sizes): ready to Serve.
  static absl::StatusOr<std::unique_ptr<FollowerServer>> Start(
      const WorkerServer::Options& options);

  // The leader's commands until it closes the group (OK) or the group fails.
  absl::Status Serve() { return follower_->Serve(); }
  int metrics_port() const { return metrics_server_->port(); }

 private:
  FollowerServer() = default;

  // The metrics server stops first: its scrapes read the follower.
  MetricsRegistry registry_;
  std::unique_ptr<RankFollower> follower_;
  std::atomic<const RankFollower*> serving_{nullptr};  // follower_, for the metrics thread
  std::unique_ptr<MetricsHttpServer> metrics_server_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_FOLLOWER_SERVER_H_
