// The one way a refusal names the request field at fault (docs/errors.md): an INVALID_ARGUMENT
// whose message is "field: why" and whose payload keeps the field, so each edge reports it in
// its own form (a gRPC status's message, an OpenAI error's `param`).
#ifndef WALSH_COMMON_FIELD_ERROR_H_
#define WALSH_COMMON_FIELD_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace walsh {

absl::Status FieldError(absl::string_view field, absl::string_view why);

// `status` with `field` as its payload (as a FieldError carries it), its message unchanged: how
// the gRPC edge restores a worker's FieldError (common/grpc_status.h).
absl::Status WithField(absl::Status status, absl::string_view field);

// The field a FieldError names; empty for any other status.
std::string FieldOf(const absl::Status& status);

}  // namespace walsh

#endif  // WALSH_COMMON_FIELD_ERROR_H_
