#include "tools/inspect/shard_plan_json.h"

#include "nlohmann/json.hpp"

namespace walsh {

std::string ShardPlanJson(const ShardPlan& plan) {
  auto span = [](Span s) { return nlohmann::json::array({s.begin, s.end}); };
  nlohmann::json doc;
  doc["ranks"] = plan.ranks();
  doc["collectives_per_layer"] = plan.CollectivesPerLayer();
  doc["comm_bytes_per_token_per_layer"] = plan.CommBytesPerTokenPerLayer();
  doc["attention_output"] = plan.AttentionOutputAligned() ? "whole slices" : "all-gathered";
  doc["gdn_output"] = plan.GdnOutputAligned() ? "whole slices" : "all-gathered";
  for (int r = 0; r < plan.ranks(); ++r) {
    const RankShard& s = plan.rank(r);
    const RankCost c = plan.Cost(r);
    doc["per_rank"].push_back({{"rank", r},
                               {"q_heads", span(s.q_heads)},
                               {"kv_heads", span(s.kv_heads)},
                               {"value_heads", span(s.value_heads)},
                               {"key_heads", span(s.key_heads)},
                               {"ffn_blocks", span(s.ffn_blocks)},
                               {"vocab", span(s.vocab)},
                               {"weight_bytes", c.weight_bytes},
                               {"kv_bytes_per_token", c.kv_bytes_per_token},
                               {"state_bytes_per_sequence", c.state_bytes_per_sequence}});
  }
  return doc.dump(2) + "\n";
}

}  // namespace walsh
