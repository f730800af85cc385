// A request the scheduler runs, and the stream it answers on. The gRPC reactor and the
// scheduler thread share it; the scheduler alone touches the generation state.
#ifndef WALSH_WORKER_SERVER_ACTIVE_REQUEST_H_
#define WALSH_WORKER_SERVER_ACTIVE_REQUEST_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grpcpp/support/status.h"
#include "walsh/v1/generator.pb.h"
#include "worker/engine/engine.h"
#include "worker/engine/generation.h"
#include "worker/server/snapshot_policy.h"

namespace walsh {

// Where a request's responses go. Thread-safe; calls after the stream ended are dropped.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  virtual void Push(v1::GenerateResponse response) = 0;
  // Ends the stream with this status (after the queued responses).
  virtual void Complete(const grpc::Status& status) = 0;
};

using Clock = std::chrono::steady_clock;

struct ActiveRequest {
  std::string request_id;
  int32_t priority = 0;
  uint64_t arrival = 0;  // FCFS order among equal priorities; the latest is preempted first
  Clock::time_point arrived_at;
  std::optional<std::chrono::system_clock::time_point> deadline;
  std::vector<int32_t> prompt;
  std::unique_ptr<Generation> generation;
  std::shared_ptr<ResponseSink> sink;
  std::atomic<bool> cancelled{false};

  // Scheduler state.
  std::vector<int32_t> tokens;  // prompt + outputs: what the engine must have seen
  size_t fed = 0;               // how many of `tokens` the engine's sequence holds
  std::optional<SequenceId> sequence;
  Clock::time_point admitted_at, first_token_at, last_token_at;
  bool started_sent = false;
  bool return_prompt_ids = false;
  uint64_t seed = 0;
  int64_t replayed = 0;  // outputs that came with a Resume and are not sent again
  PrefixLookup prefix;   // what admission found in the prefix cache
  std::vector<SnapshotPoint> snapshot_points;  // where prefill stops for a snapshot, in order
};

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_ACTIVE_REQUEST_H_
