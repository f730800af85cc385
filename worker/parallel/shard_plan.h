// How a tensor-parallel group splits the weights. Every ternary projection is split by output
// rows in whole units, so each rank reads only its rows and rotates the full (replicated)
// input itself:
//   attn_q: whole heads (query + gate rows), attn_k/v: whole KV heads (head_dim rows),
//   GDN attn_qkv / attn_gate: whole GDN heads, ffn_gate/up: whole rotation blocks of the FFN
//   width, ffn_down / attn_output / ssm_out: whole rotation blocks of the hidden width,
//   output: the vocabulary. Units are dealt out contiguously, so shards may be uneven.
// Small unfolded weights (ssm_alpha/beta), norms and the embedding stay with rank 0.
#ifndef WALSH_WORKER_PARALLEL_SHARD_PLAN_H_
#define WALSH_WORKER_PARALLEL_SHARD_PLAN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker/model/model_file.h"

namespace walsh {

struct RowRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

struct WeightShards {
  std::string name;
  int64_t rows = 0, cols = 0, unit = 0;  // unit: rows that stay together
  uint64_t row_bytes = 0;
  std::vector<RowRange> ranks;
};

class ShardPlan {
 public:
  static ShardPlan Build(const ModelFile& model, int ranks);

  int ranks() const { return ranks_; }
  const WeightShards* Find(const std::string& weight) const;
  const std::map<std::string, WeightShards>& weights() const { return weights_; }
  // Packed weight bytes each rank reads (its shards; rank 0 also the unsplit tensors).
  std::vector<uint64_t> BytesPerRank() const;
  std::string DebugString() const;

 private:
  int ranks_ = 1;
  std::map<std::string, WeightShards> weights_;
  uint64_t unsplit_bytes_ = 0;
};

}  // namespace walsh

#endif  // WALSH_WORKER_PARALLEL_SHARD_PLAN_H_
