#include "worker/engine/qwen35_graph.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace walsh {

// One activation that feeds projections, with its transformed and quantized forms made once
// and shared by every projection that reads it (q/k/v, qkv/gate, gate/up): docs/format.md
// §7.2 "Sharing". Each form is tagged with the transform that produced it.
class Qwen35Graph::ProjectionInput {
 public:
  ProjectionInput(Backend& backend, Tensor plain) : backend_(backend), plain_(plain) {}

  int64_t width() const { return plain_.cols; }

  absl::StatusOr<Q8Tensor> Quantized(Transform t, const int8_t* signs, Q8Layout layout) {
    const int index = static_cast<int>(t) * 2 + static_cast<int>(layout);
    if (!have_q8_[index]) {
      ASSIGN_OR_RETURN(q8_[index], backend_.Quantized(index, plain_.rows, plain_.cols, layout));
      RETURN_IF_ERROR(backend_.RotateQuantize(plain_, t, signs, q8_[index]));
      have_q8_[index] = true;
    }
    return q8_[index];
  }

  absl::StatusOr<Tensor> Rotated(Transform t, const int8_t* signs) {
    if (t == Transform::kPlain) return plain_;
    const int index = static_cast<int>(t);
    if (!have_f32_[index]) {
      const Buffer id = static_cast<Buffer>(static_cast<int>(Buffer::kRotated0) + index);
      ASSIGN_OR_RETURN(f32_[index], backend_.Activation(id, plain_.rows, plain_.cols));
      RETURN_IF_ERROR(backend_.Rotate(plain_, t, signs, f32_[index]));
      have_f32_[index] = true;
    }
    return f32_[index];
  }

 private:
  Backend& backend_;
  Tensor plain_;
  Q8Tensor q8_[kQuantizedBuffers];
  bool have_q8_[kQuantizedBuffers] = {};
  Tensor f32_[3];
  bool have_f32_[3] = {};
};

Transform Qwen35Graph::RequiredTransform(const Projection& p) {
  if (!p.folded) return Transform::kPlain;
  return p.gdn_permute ? Transform::kPermutedRotated : Transform::kRotated;
}

absl::Status Qwen35Graph::CheckTransform(const Projection& p, Transform applied) {
  if (applied != RequiredTransform(p)) {
    return absl::InternalError(
        absl::StrCat("graph check: '", p.name, "' ", p.folded ? "is folded" : "is not folded",
                     " but its input got transform ", static_cast<int>(applied), ", not ",
                     static_cast<int>(RequiredTransform(p))));
  }
  return absl::OkStatus();
}

absl::Status Qwen35Graph::Project(const Projection& p, Site site, ProjectionInput& in, Tensor y) {
  if (p.w.cols != in.width()) {
    return absl::InternalError(absl::StrCat("'", p.name, "' takes width ", p.w.cols,
                                            ", got an activation of width ", in.width()));
  }
  // The GDN permutation belongs to ssm_out's site when the contract groups the value heads.
  const bool permute = site == Site::kGdnOutput && model_.contract().gdn_v_grouped;
  const Transform applied = !p.folded ? Transform::kPlain
                            : permute ? Transform::kPermutedRotated
                                      : Transform::kRotated;
  RETURN_IF_ERROR(CheckTransform(p, applied));
  if (quantize_) {
    ASSIGN_OR_RETURN(Q8Tensor x, in.Quantized(applied, p.signs, Q8LayoutFor(p.w.format)));
    return backend_.MatMul(p, x, y);
  }
  ASSIGN_OR_RETURN(Tensor x, in.Rotated(applied, p.signs));
  return backend_.MatMulF32(p, x, y);
}

absl::Status Qwen35Graph::AttentionMixer(const LayerWeights& L, Tensor normed, Tensor out) {
  const Qwen35Config& c = model_.config();
  const int64_t n = normed.rows, hd = c.key_length, nh = c.head_count;
  const int64_t kv_dim = c.head_count_kv * hd;
  ASSIGN_OR_RETURN(Tensor q_gate, backend_.Activation(Buffer::kAttnQueryGate, n, 2 * nh * hd));
  ASSIGN_OR_RETURN(Tensor k, backend_.Activation(Buffer::kAttnKey, n, kv_dim));
  ASSIGN_OR_RETURN(Tensor v, backend_.Activation(Buffer::kAttnValue, n, kv_dim));
  ASSIGN_OR_RETURN(Tensor attn, backend_.Activation(Buffer::kAttnOut, n, nh * hd));
  ProjectionInput in(backend_, normed);
  RETURN_IF_ERROR(Project(L.attn.q, Site::kPlainBasis, in, q_gate));
  RETURN_IF_ERROR(Project(L.attn.k, Site::kPlainBasis, in, k));
  RETURN_IF_ERROR(Project(L.attn.v, Site::kPlainBasis, in, v));
  // Every token's K and V go into the cache before any token attends.
  RETURN_IF_ERROR(backend_.AttentionPrepare(L.attn, L.cache_index, q_gate, k, v));
  RETURN_IF_ERROR(backend_.Attention(L.cache_index, q_gate, attn));
  ProjectionInput attn_in(backend_, attn);
  return Project(L.attn.o, Site::kPlainBasis, attn_in, out);
}

absl::Status Qwen35Graph::GdnMixer(const LayerWeights& L, Tensor normed, Tensor out) {
  const Qwen35Config& c = model_.config();
  const int64_t n = normed.rows, nv = c.ssm_time_step_rank;
  ASSIGN_OR_RETURN(Tensor qkv, backend_.Activation(Buffer::kGdnQkv, n, c.gdn_conv_dim()));
  ASSIGN_OR_RETURN(Tensor u, backend_.Activation(Buffer::kGdnConvOut, n, c.gdn_conv_dim()));
  ASSIGN_OR_RETURN(Tensor z, backend_.Activation(Buffer::kGdnGate, n, c.ssm_inner_size));
  ASSIGN_OR_RETURN(Tensor ab, backend_.Activation(Buffer::kGdnAlphaBeta, n, 2 * nv));
  ASSIGN_OR_RETURN(Tensor gdn, backend_.Activation(Buffer::kGdnOut, n, c.ssm_inner_size));
  ProjectionInput in(backend_, normed);
  RETURN_IF_ERROR(Project(L.gdn.qkv, Site::kPlainBasis, in, qkv));
  RETURN_IF_ERROR(Project(L.gdn.gate, Site::kPlainBasis, in, z));
  // ssm_alpha / ssm_beta are not folded: they read the plain normed state (docs/format.md §8.3).
  RETURN_IF_ERROR(backend_.DenseProject(L.gdn.alpha, normed, ab, 0));
  RETURN_IF_ERROR(backend_.DenseProject(L.gdn.beta, normed, ab, nv));
  RETURN_IF_ERROR(backend_.GdnConv(L.gdn, L.cache_index, qkv, u));
  RETURN_IF_ERROR(backend_.GdnRecurrence(L.gdn, L.cache_index, u, z, ab, gdn));
  ProjectionInput gdn_in(backend_, gdn);
  return Project(L.gdn.out, Site::kGdnOutput, gdn_in, out);
}

absl::Status Qwen35Graph::Ffn(const LayerWeights& L, Tensor normed, Tensor out) {
  const int64_t n = normed.rows, F = model_.config().feed_forward_length;
  ASSIGN_OR_RETURN(Tensor gate, backend_.Activation(Buffer::kFfnGate, n, F));
  ASSIGN_OR_RETURN(Tensor up, backend_.Activation(Buffer::kFfnUp, n, F));
  ASSIGN_OR_RETURN(Tensor act, backend_.Activation(Buffer::kFfnAct, n, F));
  ProjectionInput in(backend_, normed);
  RETURN_IF_ERROR(Project(L.ffn_gate, Site::kPlainBasis, in, gate));
  RETURN_IF_ERROR(Project(L.ffn_up, Site::kPlainBasis, in, up));
  RETURN_IF_ERROR(backend_.SwiGlu(gate, up, act));
  ProjectionInput down_in(backend_, act);
  return Project(L.ffn_down, Site::kPlainBasis, down_in, out);
}

absl::Status Qwen35Graph::Run(const StepPlan& plan, std::vector<float>* logits) {
  const Qwen35Config& c = model_.config();
  const int64_t n = static_cast<int64_t>(plan.tokens.size()), H = c.embedding_length;
  const int64_t m = static_cast<int64_t>(plan.logit_tokens.size());
  RETURN_IF_ERROR(backend_.BeginStep(plan));
  ASSIGN_OR_RETURN(Tensor h, backend_.Activation(Buffer::kHidden, n, H));
  ASSIGN_OR_RETURN(Tensor normed, backend_.Activation(Buffer::kNormed, n, H));
  ASSIGN_OR_RETURN(Tensor mixer, backend_.Activation(Buffer::kMixerOut, n, H));
  RETURN_IF_ERROR(
      backend_.Embed(model_.token_embd(), model_.embd_rotated(), model_.embd_signs(), h));
  for (const LayerWeights& L : model_.layers()) {
    RETURN_IF_ERROR(backend_.RmsNorm(h, L.attn_norm, c.rms_epsilon, normed));
    if (L.full_attention) {
      RETURN_IF_ERROR(AttentionMixer(L, normed, mixer));
    } else {
      RETURN_IF_ERROR(GdnMixer(L, normed, mixer));
    }
    RETURN_IF_ERROR(backend_.AddInPlace(h, mixer));
    RETURN_IF_ERROR(backend_.RmsNorm(h, L.post_attention_norm, c.rms_epsilon, normed));
    RETURN_IF_ERROR(Ffn(L, normed, mixer));
    RETURN_IF_ERROR(backend_.AddInPlace(h, mixer));
  }
  ASSIGN_OR_RETURN(Tensor last, backend_.Activation(Buffer::kLastHidden, m, H));
  RETURN_IF_ERROR(backend_.GatherLogitRows(h, last));
  ASSIGN_OR_RETURN(Tensor head_in, backend_.Activation(Buffer::kHeadIn, m, H));
  RETURN_IF_ERROR(backend_.RmsNorm(last, model_.output_norm(), c.rms_epsilon, head_in));
  ASSIGN_OR_RETURN(Tensor out, backend_.Activation(Buffer::kLogits, m, c.vocab_size));
  ProjectionInput head(backend_, head_in);
  RETURN_IF_ERROR(Project(model_.output(), Site::kPlainBasis, head, out));
  logits->resize(m * c.vocab_size);
  return backend_.ReadToHost(out, logits->data());
}

}  // namespace walsh
