// absl::Status, the vocabulary inside every module, as a gRPC status at the services' edge
// (docs/errors.md). The codes are the same numbers in both.
#ifndef WALSH_COMMON_GRPC_STATUS_H_
#define WALSH_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "common/final_status.h"
#include "grpcpp/support/status.h"

namespace walsh {

// The details of a status that is final (common/final_status.h).
inline constexpr char kFinalStatusDetails[] = "walsh.v1/final";

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()),
                      IsFinal(s) ? kFinalStatusDetails : "");
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return s.error_details() == kFinalStatusDetails ? Final(out) : out;
}

}  // namespace walsh

#endif  // WALSH_COMMON_GRPC_STATUS_H_
