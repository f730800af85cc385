#include "openai/api_error.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/field_error.h"

namespace walsh {
namespace {

// The longest prefix of `s` of at most `n` bytes that does not end inside a UTF-8 character.
size_t CharBoundary(const std::string& s, size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

std::string Quoted(const std::string& value, size_t max_bytes) {
  if (value.size() <= max_bytes) return absl::StrCat("\"", value, "\"");
  return absl::StrCat("\"", value.substr(0, CharBoundary(value, max_bytes)), "...\" (",
                      value.size(), " bytes)");
}

nlohmann::json ApiError::ToJson() const {
  const std::string shown =
      message.size() <= kMaxErrorMessageBytes
          ? message
          : absl::StrCat(message.substr(0, CharBoundary(message, kMaxErrorMessageBytes)), "... (",
                         message.size(), " bytes in all)");
  nlohmann::json e = {{"message", shown}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param.substr(0, CharBoundary(param, 256));
  if (!code.empty()) e["code"] = code;
  return {{"error", std::move(e)}};
}

ApiError ApiErrorOf(const absl::Status& s) {
  const std::string message(s.message());
  ApiError e;
  e.message = message;
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      e.http_status = 400;
      e.param = FieldOf(s);
      break;
    case absl::StatusCode::kUnauthenticated:
      e = {401, message, "authentication_error", "", "invalid_api_key"};
      break;
    case absl::StatusCode::kPermissionDenied:
      e = {403, message, "permission_error", "", ""};
      break;
    case absl::StatusCode::kNotFound:
      e = {404, message, "not_found_error", "", ""};
      break;
    case absl::StatusCode::kResourceExhausted:
      // gRPC's own refusal of a message over its 4 MiB limit: the request is too large.
      if (absl::StartsWith(message, "Received message larger than max")) {
        e = {413, message, "invalid_request_error", "", "request_too_large"};
      } else {
        e = {429, message, "rate_limit_error", "", "rate_limit_exceeded"};
      }
      break;
    case absl::StatusCode::kFailedPrecondition:
      e = {400, message, "invalid_request_error", "", ""};
      break;
    case absl::StatusCode::kAlreadyExists:
      e = {409, message, "invalid_request_error", "", "conflict"};
      break;
    case absl::StatusCode::kUnimplemented:
      e = {501, message, "not_implemented_error", "", ""};
      break;
    case absl::StatusCode::kUnavailable:
      e = {503, message, "service_unavailable_error", "", ""};
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e = {504, message, "timeout_error", "", ""};
      break;
    case absl::StatusCode::kCancelled:
      e = {499, message, "cancelled", "", ""};
      break;
    default:
      e = {500, message, "internal_error", "", ""};
  }
  return e;
}

ApiError ApiErrorOf(const absl::Status& s,
                    const std::vector<std::pair<std::string, std::string>>& field_names) {
  if (s.code() == absl::StatusCode::kInvalidArgument || s.code() == absl::StatusCode::kOutOfRange) {
    const std::string message(s.message());
    // The field a worker's FieldError carries across the gRPC edge; a status without one (a
    // refusal that names no field as a payload) is read by its message's "field: " prefix.
    std::string field = FieldOf(s);
    if (field.empty()) field = message.substr(0, message.find(':'));
    for (const auto& [proto_name, name] : field_names) {
      if (absl::StartsWith(field, proto_name)) {
        const std::string renamed = name + field.substr(proto_name.size());
        ApiError e = ApiErrorOf(s);
        e.param = renamed;
        e.message =
            absl::StartsWith(message, field) ? renamed + message.substr(field.size()) : message;
        return e;
      }
    }
  }
  return ApiErrorOf(s);
}

}  // namespace walsh
