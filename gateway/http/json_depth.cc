#include "gateway/http/json_depth.h"

#include <utility>
#include <vector>

namespace walsh {

bool JsonDepthAtMost(const nlohmann::json& v, int limit) {
  std::vector<std::pair<const nlohmann::json*, int>> todo = {{&v, 0}};
  while (!todo.empty()) {
    const auto [node, depth] = todo.back();
    todo.pop_back();
    if (!node->is_structured()) continue;
    if (depth + 1 > limit) return false;
    for (const auto& child : *node) todo.emplace_back(&child, depth + 1);
  }
  return true;
}

}  // namespace walsh
