#include "worker/engine/model.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/ggml_types.h"

namespace walsh {
namespace {

absl::StatusOr<const GgufTensorInfo*> Tensor(const GgufFile& g, const std::string& name) {
  const GgufTensorInfo* t = g.FindTensor(name);
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat("missing tensor '", name, "'"));
  return t;
}

absl::StatusOr<const float*> F32(const GgufFile& g, const std::string& name) {
  ASSIGN_OR_RETURN(const GgufTensorInfo* t, Tensor(g, name));
  if (t->type != kGgmlF32) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' must be F32"));
  }
  return reinterpret_cast<const float*>(t->data);
}

absl::StatusOr<TernaryWeights> Ternary(const GgufFile& g, const std::string& name) {
  ASSIGN_OR_RETURN(const GgufTensorInfo* t, Tensor(g, name));
  const TernaryFormatTraits* format = FindTernaryFormat(t->type);
  if (format == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("tensor '", name, "' is ", GgmlTypeName(t->type),
                     "; the engine runs PQ2_0 and PTQ1_0 projections only"));
  }
  return TernaryWeights{format->format, t->data, static_cast<int64_t>(t->ne[1]),
                        static_cast<int64_t>(t->ne[0])};
}

absl::StatusOr<DenseWeight> Dense(const GgufFile& g, const std::string& name) {
  ASSIGN_OR_RETURN(const GgufTensorInfo* t, Tensor(g, name));
  DenseFormat format;
  switch (t->type) {
    case kGgmlF32:
      format = DenseFormat::kF32;
      break;
    case kGgmlF16:
      format = DenseFormat::kF16;
      break;
    case kGgmlBf16:
      format = DenseFormat::kBf16;
      break;
    default:
      return absl::UnimplementedError(absl::StrCat("tensor '", name, "' is ", GgmlTypeName(t->type),
                                                   "; the engine runs F32, F16 and BF16 here"));
  }
  return DenseWeight{format, t->data, static_cast<int64_t>(t->ne[1]),
                     static_cast<int64_t>(t->ne[0])};
}

}  // namespace

absl::StatusOr<Projection> Model::BindProjection(const std::string& name) const {
  Projection p;
  p.name = name;
  ASSIGN_OR_RETURN(p.w, Ternary(gguf(), name));
  if (const FoldedWeight* f = contract().FindFolded(name)) {
    p.folded = true;
    p.gdn_permute = f->gdn_permute;
    p.signs = contract().SignsFor(f->width);
  }
  return p;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Bind(ModelFile file) {
  std::unique_ptr<Model> m(new Model(std::move(file)));
  const GgufFile& g = m->gguf();
  const Qwen35Config& c = m->config();
  ASSIGN_OR_RETURN(m->token_embd_, Ternary(g, "token_embd.weight"));
  m->embd_rotated_ = m->contract().IsInverse("token_embd.weight");
  m->embd_signs_ = m->contract().SignsFor(c.embedding_length);
  if (m->contract().tied_output) {
    // Version 2: the embedding table doubles as the folded LM head.
    ASSIGN_OR_RETURN(m->output_.w, Ternary(g, "token_embd.weight"));
    m->output_.name = "token_embd.weight (head)";
    m->output_.folded = true;
    m->output_.signs = m->embd_signs_;
  } else {
    ASSIGN_OR_RETURN(m->output_, m->BindProjection("output.weight"));
  }
  ASSIGN_OR_RETURN(m->output_norm_, F32(g, "output_norm.weight"));
  for (int64_t i = 0; i < c.block_count; ++i) {
    const std::string p = absl::StrCat("blk.", i, ".");
    LayerWeights L;
    L.full_attention = c.IsFullAttention(i);
    ASSIGN_OR_RETURN(L.attn_norm, F32(g, p + "attn_norm.weight"));
    ASSIGN_OR_RETURN(L.post_attention_norm, F32(g, p + "post_attention_norm.weight"));
    if (L.full_attention) {
      L.cache_index = m->n_attention_++;
      ASSIGN_OR_RETURN(L.attn.q, m->BindProjection(p + "attn_q.weight"));
      ASSIGN_OR_RETURN(L.attn.k, m->BindProjection(p + "attn_k.weight"));
      ASSIGN_OR_RETURN(L.attn.v, m->BindProjection(p + "attn_v.weight"));
      ASSIGN_OR_RETURN(L.attn.o, m->BindProjection(p + "attn_output.weight"));
      ASSIGN_OR_RETURN(L.attn.q_norm, F32(g, p + "attn_q_norm.weight"));
      ASSIGN_OR_RETURN(L.attn.k_norm, F32(g, p + "attn_k_norm.weight"));
    } else {
      L.cache_index = m->n_gdn_++;
      ASSIGN_OR_RETURN(L.gdn.qkv, m->BindProjection(p + "attn_qkv.weight"));
      ASSIGN_OR_RETURN(L.gdn.gate, m->BindProjection(p + "attn_gate.weight"));
      ASSIGN_OR_RETURN(L.gdn.out, m->BindProjection(p + "ssm_out.weight"));
      ASSIGN_OR_RETURN(L.gdn.alpha, Dense(g, p + "ssm_alpha.weight"));
      ASSIGN_OR_RETURN(L.gdn.beta, Dense(g, p + "ssm_beta.weight"));
      if (m->contract().FindFolded(p + "ssm_alpha.weight") ||
          m->contract().FindFolded(p + "ssm_beta.weight")) {
        return absl::UnimplementedError(
            absl::StrCat("folded '", p, "ssm_alpha/beta' weights are not supported by the engine"));
      }
      ASSIGN_OR_RETURN(L.gdn.conv, F32(g, p + "ssm_conv1d.weight"));
      ASSIGN_OR_RETURN(L.gdn.ssm_a, F32(g, p + "ssm_a"));
      ASSIGN_OR_RETURN(L.gdn.dt_bias, F32(g, p + "ssm_dt.bias"));
      ASSIGN_OR_RETURN(L.gdn.norm, F32(g, p + "ssm_norm.weight"));
    }
    ASSIGN_OR_RETURN(L.ffn_gate, m->BindProjection(p + "ffn_gate.weight"));
    ASSIGN_OR_RETURN(L.ffn_up, m->BindProjection(p + "ffn_up.weight"));
    ASSIGN_OR_RETURN(L.ffn_down, m->BindProjection(p + "ffn_down.weight"));
    m->layers_.push_back(L);
  }
  return m;
}

}  // namespace walsh
