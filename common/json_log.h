// Structured logs: one JSON object per line on stderr, with time, level and event, plus any
// fields (request_id on every line that concerns a request).
#ifndef WALSH_COMMON_JSON_LOG_H_
#define WALSH_COMMON_JSON_LOG_H_

#include <string>

#include "nlohmann/json.hpp"

namespace walsh {

// `fields` must be a JSON object.
void LogJson(const char* level, const std::string& event,
             nlohmann::json fields = nlohmann::json::object());

}  // namespace walsh

#endif  // WALSH_COMMON_JSON_LOG_H_
