// An error as the OpenAI API reports it: an HTTP status and the body
// {"error": {"message", "type", "param", "code"}}. `param` names the request field at fault.
#ifndef WALSH_OPENAI_API_ERROR_H_
#define WALSH_OPENAI_API_ERROR_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace walsh {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null

  nlohmann::json ToJson() const;
};

// A client's value as an error message quotes it: whole when short, otherwise its first
// `max_bytes` (never a split character) and its length, so a 1 MB value gives no 1 MB answer.
std::string Quoted(const std::string& value, size_t max_bytes = 64);

// The most bytes of message an error body carries (the rest is cut, saying so).
inline constexpr size_t kMaxErrorMessageBytes = 1024;

// A status as the HTTP API reports it (docs/errors.md): its code picks the HTTP status and the
// error's type, a FieldError's field becomes `param`.
ApiError ApiErrorOf(const absl::Status& s);
// A status from a walsh.v1 call (the HTTP face calls the gateway's own service), whose
// INVALID_ARGUMENT names a walsh.v1 field ("sampling.temperature: ..."): `field_names` maps
// those prefixes to the request's own field names ({"sampling.temperature", "temperature"}),
// which then name `param` too.
ApiError ApiErrorOf(const absl::Status& s,
                    const std::vector<std::pair<std::string, std::string>>& field_names);

}  // namespace walsh

#endif  // WALSH_OPENAI_API_ERROR_H_
