// A request the scheduler runs, and where its results go, in the engine's and the scheduler's
// own terms: the service edge (services.cc) turns them into walsh.v1 responses and gRPC
// statuses. The gRPC reactor and the scheduler thread share it; the scheduler alone touches the
// generation state.
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

#include "absl/status/status.h"
#include "worker/engine/engine.h"
#include "worker/engine/generation.h"
#include "worker/engine/image_prompt.h"
#include "worker/server/snapshot_policy.h"
#include "worker/speculative/draft_backoff.h"

namespace walsh {

// The prompt is in the engine and the first token is on its way.
struct RequestStarted {
  std::string request_id;
  int64_t prompt_tokens = 0;
  uint64_t seed = 0;
  std::vector<int32_t> prompt_ids;  // empty unless the request asked for them
};

// How a request ended normally, and what it cost.
struct RequestFinished {
  FinishReason reason = FinishReason::kNone;
  std::string matched_stop;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double queue_seconds = 0, time_to_first_token_seconds = 0, total_seconds = 0;
};

// Where a request's results go. Thread-safe; calls after the end are dropped. Exactly one of
// Finished and Failed ends it.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  virtual void Started(const RequestStarted& started) = 0;
  virtual void Token(const GeneratedToken& token) = 0;
  virtual void Finished(const RequestFinished& finished) = 0;
  // Ends it with an error: cancelled, past its deadline, refused, the engine failed.
  virtual void Failed(const absl::Status& status) = 0;
  // False while the client has not read what was sent: the scheduler holds the request's next
  // decode (keeping its place and cache) until the sink has room and wakes it.
  virtual bool HasRoom() { return true; }
};

using Clock = std::chrono::steady_clock;

struct ActiveRequest {
  std::string request_id;
  int32_t priority = 0;
  uint64_t arrival = 0;  // FCFS order among equal priorities; the latest is preempted first
  Clock::time_point arrived_at;
  std::optional<std::chrono::system_clock::time_point> deadline;
  std::vector<int32_t> prompt;
  // Its images' rows, spans and cache keys (docs/vision.md §4); null for text.
  std::shared_ptr<const PromptImages> images;
  // Declared before the generation, which reads it until its last mask stops, so it outlives it.
  std::atomic<bool> cancelled{false};
  std::unique_ptr<Generation> generation;
  std::shared_ptr<ResponseSink> sink;

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
  // Speculative decoding: the most tokens the request lets a step draft (-1: the worker's
  // setting; 0: none), and its drafts' back-off (draft_backoff.h).
  int64_t speculative_tokens = -1;
  DraftBackoff draft_backoff;
  // A sample waiting for its constraint's mask, still computing on the mask threads: the logits
  // of the position it samples. The request takes no step until the mask is ready; the others
  // go on (docs/structured_output.md §Bounds).
  std::vector<float> deferred_logits;
};

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_ACTIVE_REQUEST_H_
