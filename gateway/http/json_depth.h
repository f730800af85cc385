// How deeply a JSON value nests, measured without recursion. nlohmann::json parses and
// destroys any depth without recursing, but copies and dumps recurse, so a body nested a
// million levels deep would overflow a thread's stack: such values are refused first.
#ifndef WALSH_GATEWAY_HTTP_JSON_DEPTH_H_
#define WALSH_GATEWAY_HTTP_JSON_DEPTH_H_

#include "nlohmann/json.hpp"

namespace walsh {

// The deepest nesting accepted in a request body or in a model's tool call.
inline constexpr int kMaxJsonDepth = 64;

// True if no array or object in `v` lies more than `limit` levels deep (a scalar is depth 0).
bool JsonDepthAtMost(const nlohmann::json& v, int limit);

}  // namespace walsh

#endif  // WALSH_GATEWAY_HTTP_JSON_DEPTH_H_
