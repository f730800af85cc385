// walsh-inspect --tp N --json: the tensor-parallel plan for machines.
#ifndef WALSH_TOOLS_INSPECT_SHARD_PLAN_JSON_H_
#define WALSH_TOOLS_INSPECT_SHARD_PLAN_JSON_H_

#include <string>

#include "worker/parallel/shard_plan.h"

namespace walsh {

// {"ranks", "collectives_per_layer", "comm_bytes_per_token_per_layer", "attention_output",
//  "gdn_output", "per_rank": [{"rank", "q_heads", "kv_heads", "value_heads", "key_heads",
//  "ffn_blocks", "vocab", "weight_bytes", "kv_bytes_per_token", "state_bytes_per_sequence"}]}
std::string ShardPlanJson(const ShardPlan& plan);

}  // namespace walsh

#endif  // WALSH_TOOLS_INSPECT_SHARD_PLAN_JSON_H_
