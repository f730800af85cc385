#include "gateway/http/api_error.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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

ApiError BadField(const std::string& param, const std::string& why) {
  return ApiError{400, param + ": " + why, "invalid_request_error", param, ""};
}

ApiError FromGrpcStatus(const grpc::Status& s,
                        const std::vector<std::pair<std::string, std::string>>& field_names) {
  ApiError e;
  e.message = s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      e.http_status = 400;
      for (const auto& [proto_name, name] : field_names) {
        if (absl::StartsWith(e.message, proto_name)) {
          e.message = name + e.message.substr(proto_name.size());
          const size_t colon = e.message.find(':');
          e.param = e.message.substr(0, colon);
          break;
        }
      }
      break;
    case grpc::StatusCode::UNAUTHENTICATED:
      e = {401, s.error_message(), "authentication_error", "", "invalid_api_key"};
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
      e = {403, s.error_message(), "permission_error", "", ""};
      break;
    case grpc::StatusCode::NOT_FOUND:
      e = {404, s.error_message(), "not_found_error", "", ""};
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      // gRPC's own refusal of a message over its 4 MiB limit: the request is too large.
      if (absl::StartsWith(s.error_message(), "Received message larger than max")) {
        e = {413, s.error_message(), "invalid_request_error", "", "request_too_large"};
      } else {
        e = {429, s.error_message(), "rate_limit_error", "", "rate_limit_exceeded"};
      }
      break;
    case grpc::StatusCode::FAILED_PRECONDITION:
      e = {400, s.error_message(), "invalid_request_error", "", ""};
      break;
    case grpc::StatusCode::ALREADY_EXISTS:
      e = {409, s.error_message(), "invalid_request_error", "", "conflict"};
      break;
    case grpc::StatusCode::UNIMPLEMENTED:
      e = {501, s.error_message(), "not_implemented_error", "", ""};
      break;
    case grpc::StatusCode::UNAVAILABLE:
      e = {503, s.error_message(), "service_unavailable_error", "", ""};
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      e = {504, s.error_message(), "timeout_error", "", ""};
      break;
    case grpc::StatusCode::CANCELLED:
      e = {499, s.error_message(), "cancelled", "", ""};
      break;
    default:
      e = {500, s.error_message(), "internal_error", "", ""};
  }
  return e;
}

}  // namespace walsh
