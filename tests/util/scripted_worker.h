// A stand-in worker in the test process that passes every health, contract and load check and
// answers Generate and Resume from a script: a refusal, a failure after N tokens, a pace, or
// silence (a worker that accepts streams and then hangs); Finished reports the usage a worker
// would. Its tokens are a function of the seed and the output index only (ScriptedToken), the same
// on every scripted worker, so a stream migrated exactly reads as one unbroken sequence.
#ifndef WALSH_TESTS_UTIL_SCRIPTED_WORKER_H_
#define WALSH_TESTS_UTIL_SCRIPTED_WORKER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh::testing {

int32_t ScriptedToken(uint64_t seed, uint64_t index);
// The prompt ids a scripted worker reports (in Started) for every request.
inline const std::vector<int32_t> kScriptedPromptIds = {11, 12, 13};

struct Script {
  // Generate and Resume take the stream and answer nothing, holding it open until the caller
  // cancels it or its deadline passes.
  bool mute = false;
  // Generate ends with this code before answering anything (UNAVAILABLE: a worker fault,
  // INVALID_ARGUMENT: the request's).
  std::optional<grpc::StatusCode> refuse;
  // After Started and this many tokens, Generate (or Resume) ends UNAVAILABLE; -1: never.
  int fail_after_tokens = -1;
  int resume_fail_after_tokens = -1;
  std::chrono::milliseconds token_interval{0};  // between tokens
  size_t text_bytes = 0;                        // text padding per token (a bigger message)
};

class ScriptedWorker {
 public:
  explicit ScriptedWorker(Script script = {});
  ~ScriptedWorker();
  ScriptedWorker(const ScriptedWorker&) = delete;
  ScriptedWorker& operator=(const ScriptedWorker&) = delete;

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  // Its gRPC server, for a face that calls it in process (OpenAiServer).
  grpc::Server* server() const { return server_.get(); }
  void set_script(const Script& script) ABSL_LOCKS_EXCLUDED(mu_);
  Script script() const ABSL_LOCKS_EXCLUDED(mu_);

  struct Counts {
    std::atomic<int> generates{0}, resumes{0};
    std::atomic<int> open{0};  // streams held open now
    std::atomic<int64_t> tokens_written{0};
    // A Resume whose emitted ids were not this worker's own sequence for the seed.
    std::atomic<int> bad_resumes{0};
  };
  const Counts& counts() const { return counts_; }
  // The number of emitted ids each Resume carried, in arrival order.
  std::vector<size_t> resumed_at() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Generator;
  class Worker;
  class Stream;

  mutable Mutex mu_;
  Script script_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> resumed_at_ ABSL_GUARDED_BY(mu_);
  Counts counts_;
  std::unique_ptr<Generator> generator_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace walsh::testing

#endif  // WALSH_TESTS_UTIL_SCRIPTED_WORKER_H_
