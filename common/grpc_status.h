// absl::Status, the vocabulary inside every module, as a gRPC status at the services' edge
// (docs/errors.md). The codes are the same numbers in both. The payloads other walsh processes
// read (a final status, common/final_status.h; the field a FieldError names,
// common/field_error.h) cross in the status's details as a google.rpc.Status holding one
// walsh.v1.ErrorMarks, the form every gRPC library decodes details as
// (proto/walsh/v1/status.proto).
#ifndef WALSH_COMMON_GRPC_STATUS_H_
#define WALSH_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "common/field_error.h"
#include "common/final_status.h"
#include "grpcpp/support/status.h"
#include "walsh/v1/status.pb.h"

namespace walsh {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  v1::ErrorMarks marks;
  marks.set_final(IsFinal(s));
  marks.set_field(FieldOf(s));
  std::string details;
  if (marks.final() || !marks.field().empty()) {
    v1::RpcStatus status;
    status.set_code(static_cast<int>(s.code()));
    status.set_message(std::string(s.message()));
    status.add_details()->PackFrom(marks);
    details = status.SerializeAsString();
  }
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()), details);
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  v1::RpcStatus status;
  if (s.error_details().empty() || !status.ParseFromString(s.error_details())) return out;
  for (const google::protobuf::Any& detail : status.details()) {
    v1::ErrorMarks marks;
    if (!detail.UnpackTo(&marks)) continue;
    if (marks.final()) out = Final(out);
    if (!marks.field().empty()) out = WithField(out, marks.field());
  }
  return out;
}

// Whether a gRPC status from a worker is final: another worker would fail it the same way.
inline bool IsFinalGrpcStatus(const grpc::Status& s) { return IsFinal(FromGrpcStatus(s)); }

}  // namespace walsh

#endif  // WALSH_COMMON_GRPC_STATUS_H_
