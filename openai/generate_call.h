// One Generate stream on the gateway's own service, called over an in-process channel so an
// HTTP request is admitted, authorized, limited, routed, retried and migrated exactly as a
// gRPC client's. The stream's messages wait in a short queue for the HTTP thread; while it is
// full no more are read, so a slow HTTP client slows its stream as a slow gRPC client does
// (and past --stall-timeout-seconds the gateway ends it).
#ifndef WALSH_OPENAI_GENERATE_CALL_H_
#define WALSH_OPENAI_GENERATE_CALL_H_

#include <chrono>
#include <deque>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh {

class GenerateCall final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  enum class Next { kMessage, kIdle, kDone };

  // Starts the call; `metadata` is sent with it (authorization, the HTTP client's address).
  GenerateCall(v1::Generator::Stub* stub, const v1::GenerateRequest& request,
               const std::multimap<std::string, std::string>& metadata);
  ~GenerateCall() override;  // cancels the call if it is still open and waits for its end

  // The next message, kIdle if none came within `wait`, or kDone once the stream has ended
  // (then status() says how).
  Next Wait(std::chrono::milliseconds wait, v1::GenerateResponse* out) ABSL_LOCKS_EXCLUDED(mu_);
  grpc::Status status() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops reading and cancels the call; Wait() then drains what was read and reports kDone.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone(const grpc::Status& s) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr size_t kQueued = 8;  // messages read ahead of the HTTP thread

  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::GenerateResponse incoming_;
  Mutex mu_;
  CondVar changed_;
  std::deque<v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = false;     // a read is outstanding
  bool reads_over_ ABSL_GUARDED_BY(mu_) = false;  // a read returned false
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;     // Cancel(): no more reads
  bool held_ ABSL_GUARDED_BY(mu_) = false;        // our AddHold is not yet removed
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walsh

#endif  // WALSH_OPENAI_GENERATE_CALL_H_
