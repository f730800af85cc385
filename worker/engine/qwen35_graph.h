// The qwen35 forward pass (docs/format.md §8), written once against the backend interface:
// embedding, then per layer RMSNorm → mixer (full attention or Gated DeltaNet) → residual →
// RMSNorm → SwiGLU FFN → residual, then the final norm and the output head for the rows whose
// logits are asked for. Every projection's input gets the transform its weights were folded
// with, and the graph checks that tag before each product (the fork's graph check).
#ifndef WALSH_WORKER_ENGINE_QWEN35_GRAPH_H_
#define WALSH_WORKER_ENGINE_QWEN35_GRAPH_H_

#include <vector>

#include "absl/status/status.h"
#include "worker/engine/backend.h"
#include "worker/engine/model.h"

namespace walsh {

class Qwen35Graph {
 public:
  // quantize_activations off: fp32 activations against the decoded weights (a debug mode).
  Qwen35Graph(const Model& model, Backend& backend, bool quantize_activations)
      : model_(model), backend_(backend), quantize_(quantize_activations) {}

  // One step over `plan`; logits of plan.logit_tokens, row after row, into *logits.
  absl::Status Run(const StepPlan& plan, std::vector<float>* logits);

  // The transform a projection's weights require of its input.
  static Transform RequiredTransform(const Projection& p);
  // OK when `applied` is what p requires; otherwise INTERNAL naming the projection.
  static absl::Status CheckTransform(const Projection& p, Transform applied);

 private:
  class ProjectionInput;

  // The transform the graph applies at a projection site: the contract's rotation when the
  // weights are folded, with the GDN permutation only at ssm_out's site and only when the
  // contract says gdn_v_grouped. The graph check then compares it with the weights' own tag.
  enum class Site { kPlainBasis, kGdnOutput };
  absl::Status Project(const Projection& p, Site site, ProjectionInput& in, Tensor y);
  absl::Status AttentionMixer(const LayerWeights& L, Tensor normed, Tensor out);
  absl::Status GdnMixer(const LayerWeights& L, Tensor normed, Tensor out);
  absl::Status Ffn(const LayerWeights& L, Tensor normed, Tensor out);

  const Model& model_;
  Backend& backend_;
  bool quantize_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_QWEN35_GRAPH_H_
