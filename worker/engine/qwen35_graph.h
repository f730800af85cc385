// The qwen35 forward pass (docs/format.md §8), written once against the backend interface, as
// one rank of a tensor-parallel group computes it (a single device is the group of one):
// embedding, then per layer RMSNorm → mixer (full attention or Gated DeltaNet) → residual →
// RMSNorm → SwiGLU FFN → residual, then the final norm and the output head for the rows whose
// logits are asked for. The residual stream is whole on every rank; each rank computes its
// heads, its FFN blocks and its vocabulary rows, and the row-parallel products meet in the
// canonical slice tree (worker/parallel/shard_plan.h), so the logits do not depend on the rank
// count. Every projection's input gets the transform its weights were folded with; the code
// that applies it tags the activation with what it did (transform, sign vector), and the graph
// checks that tag against the weights before each product (the fork's graph check).
#ifndef WALSH_WORKER_ENGINE_QWEN35_GRAPH_H_
#define WALSH_WORKER_ENGINE_QWEN35_GRAPH_H_

#include <chrono>
#include <vector>

#include "absl/status/status.h"
#include "worker/engine/backend.h"
#include "worker/engine/model.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/shard_plan.h"

namespace walsh {

class Qwen35Graph {
 public:
  // quantize_activations off: fp32 activations against the decoded weights (a debug mode).
  // `comm` joins the ranks of `plan` (null for a single rank); plan, comm and model outlive
  // the graph.
  Qwen35Graph(const Model& model, Backend& backend, bool quantize_activations,
              const ShardPlan& plan, int rank, Communicator* comm,
              std::chrono::milliseconds collective_timeout);

  // The sizes of this rank's KV pages and state slots (its heads only).
  CacheGeometry Geometry(int64_t pages, int64_t page_size, int64_t slots) const;
  // The one place cache shapes are computed: for a rank holding these many KV heads and GDN key
  // and value heads (the whole model's counts give the TP = 1 sizes the cache plan uses).
  static CacheGeometry GeometryOf(const Model& model, int64_t kv_heads, int64_t key_heads,
                                  int64_t value_heads, int64_t pages, int64_t page_size,
                                  int64_t slots);

  // One step over `plan`; on rank 0, the logits of plan.logit_tokens, row after row, into
  // *logits (other ranks leave it untouched).
  absl::Status Run(const StepPlan& plan, std::vector<float>* logits);

  // What was done to an activation before a product, recorded by the code that did it.
  struct InputTag {
    Transform transform = Transform::kPlain;
    const int8_t* signs = nullptr;  // the sign vector it was rotated with
  };
  // The transform a projection's weights require of its input.
  static Transform RequiredTransform(const Projection& p);
  // OK when the tag is what p requires (and, when rotated, used `signs`, the weights' vector
  // for the columns at hand); otherwise INTERNAL naming the projection.
  static absl::Status CheckInput(const Projection& p, const InputTag& tag, const int8_t* signs);

 private:
  class ProjectionInput;
  // A GatedDeltaNet layer's parameters for this rank's heads, with the gathered per-channel and
  // per-head weights they point at.
  struct GdnLocal {
    GdnLayerParams params;
    std::vector<float> conv_w, ssm_a, dt_bias;
  };

  // Where a row-parallel product's input comes from: the attention or FFN output (natural
  // order), or the GatedDeltaNet output, which its kernels write in grouped order.
  enum class Site { kPlainBasis, kGdnOutput };
  // A column-parallel product of an activation in natural order.
  absl::Status Project(const Projection& p, ProjectionInput& in, const RowSelection& rows,
                       Tensor y);
  // A row-parallel product: `held` holds input columns `held_cols` of this rank.
  absl::Status RowParallel(const Projection& p, Site site, Tensor held, Span held_cols,
                           bool aligned, bool ungroup, Tensor out);
  // Every rank's part, rank-major, in each rank's copy of `buffer` (n rows per part).
  absl::Status AllGather(Tensor buffer, const std::vector<int64_t>& offsets,
                         const std::vector<int64_t>& counts);
  absl::Status AttentionMixer(const LayerWeights& L, Tensor normed, Tensor out);
  absl::Status GdnMixer(const LayerWeights& L, Tensor normed, Tensor out);
  absl::Status Ffn(const LayerWeights& L, Tensor normed, Tensor out);
  absl::Status Logits(Tensor head_in, std::vector<float>* logits);
  // What the projections read: int8 blocks, or fp32 with activation quantization off.
  DType InputType() const { return quantize_ ? DType::kQ8 : DType::kF32; }

  const Model& model_;
  Backend& backend_;
  bool quantize_;
  const ShardPlan& plan_;
  const RankShard& shard_;
  int rank_;
  Communicator* comm_;
  std::chrono::milliseconds timeout_;
  AttentionShard attention_;
  RowSelection q_rows_, kv_rows_, ffn_rows_, vocab_rows_;
  std::vector<int32_t> qkv_index_, gate_index_, alpha_beta_index_;  // GDN rows, grouped order
  std::vector<GdnLocal> gdn_;                                       // per GDN layer
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_QWEN35_GRAPH_H_
