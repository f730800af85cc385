// What the leader of a tensor-parallel group that spans processes tells each follower
// (rank_follower.h): every operation the engine runs on a rank's backend, in the leader's order,
// broadcast over the group's communicator. A follower runs the same graph on its shard, so the
// collectives inside a step meet as they do between in-process ranks.
//
// The wire form is the two ends' own: both are the same walsh build on the same architecture (the
// handshake checks the model; the group's ranks run one image). Decoding still checks every
// length against the bytes it has, so damaged bytes are an error, never a read past the end.
#ifndef WALSH_WORKER_ENGINE_RANK_COMMAND_H_
#define WALSH_WORKER_ENGINE_RANK_COMMAND_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/engine/backend.h"
#include "worker/engine/kv_manager.h"
#include "worker/parallel/communicator.h"

namespace walsh {

struct RankCommand {
  enum class Kind : uint32_t {
    kAllocateCaches = 1,  // pages, page_size, slots, kv_dtype
    kCopy = 2,            // copy: a slot cleared or copied, with a page
    kStep = 3,            // plan
    kStop = 4,            // the leader is closing the group
  };
  Kind kind = Kind::kStop;
  int64_t pages = 0, page_size = 0, slots = 0;
  KvCacheDtype kv_dtype = KvCacheDtype::kFp16;
  CacheCopy copy;
  StepPlan plan;
};

std::string EncodeRankCommand(const RankCommand& command);
absl::StatusOr<RankCommand> DecodeRankCommand(absl::string_view bytes);

// The leader (rank 0) sends a command to every other rank: its length, then its bytes.
absl::Status SendRankCommand(Communicator& comm, const RankCommand& command,
                             std::chrono::milliseconds timeout);
// A follower receives the next one.
absl::StatusOr<RankCommand> ReceiveRankCommand(Communicator& comm, int rank,
                                               std::chrono::milliseconds timeout);

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_RANK_COMMAND_H_
