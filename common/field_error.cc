#include "common/field_error.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

constexpr char kFieldPayload[] = "type.walsh.dev/field";

}  // namespace

absl::Status FieldError(absl::string_view field, absl::string_view why) {
  return WithField(absl::InvalidArgumentError(absl::StrCat(field, ": ", why)), field);
}

absl::Status WithField(absl::Status status, absl::string_view field) {
  status.SetPayload(kFieldPayload, absl::Cord(field));
  return status;
}

std::string FieldOf(const absl::Status& status) {
  const absl::optional<absl::Cord> field = status.GetPayload(kFieldPayload);
  return field.has_value() ? std::string(*field) : std::string();
}

}  // namespace walsh
