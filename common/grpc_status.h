// absl::Status, the vocabulary inside every module, as a gRPC status at the services' edge
// (docs/errors.md). The codes are the same numbers in both, and the payloads the edges read
// cross in the status's details: a final status (common/final_status.h) and the field a
// FieldError names (common/field_error.h), one line each.
#ifndef WALSH_COMMON_GRPC_STATUS_H_
#define WALSH_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/field_error.h"
#include "common/final_status.h"
#include "grpcpp/support/status.h"

namespace walsh {

inline constexpr char kFinalStatusDetails[] = "walsh.v1/final";
inline constexpr char kFieldDetailsPrefix[] = "walsh.v1/field=";

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  std::string details = IsFinal(s) ? kFinalStatusDetails : "";
  if (const std::string field = FieldOf(s); !field.empty()) {
    details += (details.empty() ? "" : "\n") + std::string(kFieldDetailsPrefix) + field;
  }
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()), details);
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  for (absl::string_view line : absl::StrSplit(s.error_details(), '\n')) {
    if (line == kFinalStatusDetails) {
      out = Final(out);
    } else if (absl::ConsumePrefix(&line, kFieldDetailsPrefix)) {
      out = WithField(out, line);
    }
  }
  return out;
}

// Whether a gRPC status from a worker is final: another worker would fail it the same way.
inline bool IsFinalGrpcStatus(const grpc::Status& s) { return IsFinal(FromGrpcStatus(s)); }

}  // namespace walsh

#endif  // WALSH_COMMON_GRPC_STATUS_H_
