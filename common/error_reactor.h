// A response stream that ends at once with an error, before any response: a refusal at
// admission (validation, a full queue, a buffer budget), shared by the worker and the gateway.
#ifndef WALSH_COMMON_ERROR_REACTOR_H_
#define WALSH_COMMON_ERROR_REACTOR_H_

#include "absl/status/status.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace walsh {

class ErrorReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit ErrorReactor(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
  void OnDone() override { delete this; }
};

}  // namespace walsh

#endif  // WALSH_COMMON_ERROR_REACTOR_H_
