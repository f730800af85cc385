#include "worker/parallel/shard_plan.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/weight_format.h"
#include "worker/model/ggml_types.h"

namespace walsh {
namespace {

int64_t UnitFor(const std::string& name, const Qwen35Config& c, int64_t block) {
  if (absl::EndsWith(name, ".attn_q.weight")) return 2 * c.key_length;
  if (absl::EndsWith(name, ".attn_k.weight") || absl::EndsWith(name, ".attn_v.weight"))
    return c.key_length;
  if (absl::EndsWith(name, ".attn_qkv.weight") || absl::EndsWith(name, ".attn_gate.weight")) {
    return c.ssm_state_size;
  }
  if (absl::EndsWith(name, ".ffn_gate.weight") || absl::EndsWith(name, ".ffn_up.weight") ||
      absl::EndsWith(name, ".ffn_down.weight") || absl::EndsWith(name, ".attn_output.weight") ||
      absl::EndsWith(name, ".ssm_out.weight")) {
    return block;
  }
  return 1;  // output.weight: any vocabulary split
}

}  // namespace

ShardPlan ShardPlan::Build(const ModelFile& model, int ranks) {
  ShardPlan plan;
  plan.ranks_ = ranks;
  const int64_t block = model.contract.block_size;
  for (const GgufTensorInfo& t : model.gguf->tensors()) {
    const bool ternary = FindTernaryFormat(t.type) != nullptr;
    if (!ternary || t.name == "token_embd.weight" || t.ne.size() != 2) {
      plan.unsplit_bytes_ += t.n_bytes;
      continue;
    }
    WeightShards w;
    w.name = t.name;
    w.cols = static_cast<int64_t>(t.ne[0]);
    w.rows = static_cast<int64_t>(t.ne[1]);
    w.unit = UnitFor(t.name, model.config, block);
    if (w.rows % w.unit != 0) w.unit = 1;
    w.row_bytes = t.n_bytes / t.ne[1];
    const int64_t units = w.rows / w.unit;
    for (int r = 0; r < ranks; ++r) {
      w.ranks.push_back({units * r / ranks * w.unit, units * (r + 1) / ranks * w.unit});
    }
    plan.weights_.emplace(t.name, std::move(w));
  }
  if (model.contract.tied_output) {
    // The tied head reads token_embd as a projection: split it by vocabulary like output.
    const GgufTensorInfo* t = model.gguf->FindTensor("token_embd.weight");
    WeightShards w{"token_embd.weight",
                   static_cast<int64_t>(t->ne[1]),
                   static_cast<int64_t>(t->ne[0]),
                   1,
                   t->n_bytes / t->ne[1],
                   {}};
    for (int r = 0; r < ranks; ++r)
      w.ranks.push_back({w.rows * r / ranks, w.rows * (r + 1) / ranks});
    plan.weights_.emplace("token_embd.weight (head)", std::move(w));
  }
  return plan;
}

const WeightShards* ShardPlan::Find(const std::string& weight) const {
  auto it = weights_.find(weight);
  return it == weights_.end() ? nullptr : &it->second;
}

std::vector<uint64_t> ShardPlan::BytesPerRank() const {
  std::vector<uint64_t> bytes(ranks_, 0);
  bytes[0] += unsplit_bytes_;
  for (const auto& [name, w] : weights_) {
    for (int r = 0; r < ranks_; ++r)
      bytes[r] += static_cast<uint64_t>(w.ranks[r].size()) * w.row_bytes;
  }
  return bytes;
}

std::string ShardPlan::DebugString() const {
  std::string out = absl::StrFormat(
      "tensor-parallel plan: %d ranks; each projection split by output rows\n", ranks_);
  absl::StrAppend(&out, "weight                          rows x cols    unit  rows per rank\n");
  for (const auto& [name, w] : weights_) {
    std::string ranges;
    for (int r = 0; r < ranks_; ++r) {
      absl::StrAppendFormat(&ranges, "%s[%d,%d)", r ? " " : "", w.ranks[r].begin, w.ranks[r].end);
    }
    absl::StrAppendFormat(&out, "%-30s %6d x %-6d %5d  %s\n", name, w.rows, w.cols, w.unit, ranges);
  }
  const std::vector<uint64_t> bytes = BytesPerRank();
  for (int r = 0; r < ranks_; ++r) {
    absl::StrAppendFormat(&out, "rank %d: %d packed weight bytes%s\n", r, bytes[r],
                          r == 0 ? " (with the embedding, norms and small unsplit tensors)" : "");
  }
  return out;
}

}  // namespace walsh
