// Forming a tensor-parallel group that spans processes, one rank each (docs/worker.md, "Ranks
// in separate processes"). The leader (rank 0) serves the walsh.v1.RankGroup handshake on the
// port of --dist-init-addr; each follower dials it, joins with its rank, group size, shard plan
// and model fingerprint (refused unless they are the leader's), and the ranks swap their gloo
// addresses through the handshake's store, then connect to each other directly. Once every
// rank is connected (a barrier over the new group) the handshake stops.
//
// The handshake and gloo's pairs are plain TCP: the group's ports belong on a network only the
// group reaches (deploy/k8s's LeaderWorkerSet overlay keeps them inside the pod group).
#ifndef WALSH_WORKER_SERVER_RANK_GROUP_H_
#define WALSH_WORKER_SERVER_RANK_GROUP_H_

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/backend_group.h"

namespace walsh {

struct RankGroupOptions {
  int rank = 0, size = 1;
  // host:port. The leader listens on its port (every interface); followers dial it.
  std::string init_addr;
  // Where this rank's peers reach it; empty: this host's name.
  std::string host;
  // How long the ranks wait for each other to join and connect.
  std::chrono::milliseconds timeout{300'000};
  std::string contract_fingerprint, shard_plan;
};

// Returns once every rank has joined and connected: this process's rank and its communicator.
absl::StatusOr<ProcessGroup> FormRankGroup(const RankGroupOptions& options);

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_RANK_GROUP_H_
