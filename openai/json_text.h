// The text of a JSON body or event as the HTTP API sends it: compact, and any invalid UTF-8 in
// its strings replaced (U+FFFD) rather than thrown on, since model output is bytes.
#ifndef WALSH_OPENAI_JSON_TEXT_H_
#define WALSH_OPENAI_JSON_TEXT_H_

#include <string>

#include "nlohmann/json.hpp"

namespace walsh {

inline std::string JsonText(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace walsh

#endif  // WALSH_OPENAI_JSON_TEXT_H_
