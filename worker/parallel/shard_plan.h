// How a tensor-parallel group of N ranks (N = 1, 2, 4 or 8) splits the model: heads, KV and
// state by heads, the FFN Megatron-style, and every row-parallel product over canonical input
// slices, so that the logits are bit-identical at every N (docs/architecture.md "Exact tensor
// parallelism").
//
// Column-parallel (each rank computes some output rows of the full, locally rotated input):
//   attn_q by query heads, attn_k / attn_v by the KV heads those read (replicated when N
//   exceeds the KV heads, as vLLM does), GDN attn_qkv / attn_gate / ssm_alpha / ssm_beta by
//   value heads in grouped order with the key heads they read, ffn_gate / ffn_up by rotation
//   blocks of the FFN width, the output head by vocabulary.
// Row-parallel (attn_output, ssm_out, ffn_down): the input's rotation blocks fall into 8
// canonical slices, slice s = blocks [s·B/8, (s+1)·B/8); rank r owns slices [r·8/N, (r+1)·8/N),
// rotates and quantizes only those whole blocks, and sums each slice's blocks in order; the 8
// slice sums meet in one fixed pairwise tree, the top levels after an all-gather. TP = 1
// evaluates the same tree, so every N gives the same bits. The FFN split makes each rank hold
// exactly its ffn_down slices; a mixer output whose heads straddle rotation blocks (the 27B
// shape at N = 4 and 8) is all-gathered first, then each rank takes its slices.
#ifndef WALSH_WORKER_PARALLEL_SHARD_PLAN_H_
#define WALSH_WORKER_PARALLEL_SHARD_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/model_file.h"

namespace walsh {

struct Span {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool operator==(const Span& o) const { return begin == o.begin && end == o.end; }
};

// What one rank holds and computes.
struct RankShard {
  Span q_heads, kv_heads;       // attention query heads and the KV heads they read
  Span value_heads, key_heads;  // GatedDeltaNet value heads (grouped order), their key heads
  Span ffn_blocks;              // rotation blocks of the FFN width
  Span vocab;                   // rows of the output head
};

// Per-rank costs of a plan: packed weight bytes read per decode step (the embedding lookup
// excluded), KV bytes per token, GatedDeltaNet state bytes per sequence.
struct RankCost {
  int64_t weight_bytes = 0, kv_bytes_per_token = 0, state_bytes_per_sequence = 0;
};

class ShardPlan {
 public:
  static constexpr int kSlices = 8;

  // Refuses a rank count other than 1, 2, 4 or 8, or one the model's shapes cannot serve.
  static absl::StatusOr<ShardPlan> Build(const ModelFile& model, int ranks);

  int ranks() const { return ranks_; }
  const RankShard& rank(int r) const { return shards_[r]; }

  // Columns of canonical slice s of a row-parallel input of `cols` values.
  Span SliceColumns(int64_t cols, int s) const;
  // The slices rank r owns, and the columns they cover.
  Span RankSlices(int r) const { return {r * kSlices / ranks_, (r + 1) * kSlices / ranks_}; }
  Span OwnedColumns(int64_t cols, int r) const;
  // Columns of the attention output (query heads × head width) and of the GatedDeltaNet output
  // (value heads × head width, grouped order) that rank r computes.
  Span AttentionOutputColumns(int r) const;
  Span GdnOutputColumns(int r) const;
  // Whether every rank computes exactly the columns it owns (no all-gather before the product).
  bool AttentionOutputAligned() const;
  bool GdnOutputAligned() const;  // also needs the grouped order the weights were folded in

  // Collectives of the layer that needs the most, and the bytes one rank receives per token in
  // such a layer.
  int CollectivesPerLayer() const;
  int64_t CommBytesPerTokenPerLayer() const;
  RankCost Cost(int r) const;
  std::string DebugString() const;

 private:
  int ranks_ = 1;
  int64_t block_ = 0;
  Qwen35Config config_;
  bool gdn_grouped_ = false;
  std::vector<RankShard> shards_;
  struct TensorBytes {
    std::string name;
    int64_t rows = 0, cols = 0, bytes = 0;
  };
  std::vector<TensorBytes> tensors_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_PARALLEL_SHARD_PLAN_H_
