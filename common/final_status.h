// A failure that another worker would meet the same way (its cause is the request, deterministic
// work such as a constraint's budget), though its code, RESOURCE_EXHAUSTED, would otherwise tell
// the gateway to retry elsewhere: the status carries a payload saying so, which the gRPC edge
// turns into the status's details (common/grpc_status.h) and the gateway reads (docs/errors.md).
#ifndef WALSH_COMMON_FINAL_STATUS_H_
#define WALSH_COMMON_FINAL_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace walsh {

inline constexpr char kFinalStatusPayload[] = "walsh.v1/final";

inline absl::Status Final(absl::Status s) {
  s.SetPayload(kFinalStatusPayload, absl::Cord("final"));
  return s;
}

inline bool IsFinal(const absl::Status& s) { return s.GetPayload(kFinalStatusPayload).has_value(); }

}  // namespace walsh

#endif  // WALSH_COMMON_FINAL_STATUS_H_
