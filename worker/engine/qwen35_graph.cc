#include "worker/engine/qwen35_graph.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace walsh {
namespace {

// The step's activation slots (Backend::Activation), named.
enum Buffer : int {
  kHidden,          // the residual stream h
  kNormed,          // RMSNorm(h), the mixers' and the FFN's input
  kMixerOut,        // a mixer's or the FFN's output, added into h
  kAttnQueryGate,   // q projection: query and output gate, alternating per head
  kAttnKey,         // k projection
  kAttnValue,       // v projection
  kAttnOut,         // gated attention output, attn_output's input
  kGdnQkv,          // GatedDeltaNet qkv projection: the conv input
  kGdnConvOut,      // conv + SiLU + q/k L2 norms
  kGdnGate,         // z (attn_gate projection)
  kGdnAlphaBeta,    // ssm_alpha then ssm_beta per token
  kGdnOut,          // gated-normed head outputs, ssm_out's input
  kFfnGate,         // ffn_gate projection
  kFfnUp,           // ffn_up projection
  kFfnAct,          // SwiGLU(gate, up), ffn_down's input
  kLastHidden,      // the residual rows whose logits are asked for
  kHeadIn,          // those rows, final-normed
  kLogits,          // output projection
  kGathered,        // a row-parallel input all-gathered from every rank, rank after rank
  kFullInput,       // that input reassembled in column order
  kOwnedInput,      // the columns of it this rank owns
  kSlicePartials,   // the owned canonical slices' sums, slice after slice
  kTreeGather,      // every rank's subtree sum, rank after rank
  kLogitsGathered,  // every rank's vocabulary rows of the logits, rank after rank
  kRowParallelIn,   // a row-parallel projection's transformed input (int8 or fp32)
  kInputForms,      // the first of ProjectionInput's forms (kInputFormCount of them)
};
constexpr int kTransforms = 3;  // Transform's values
constexpr int kQ8Layouts = 3;   // Q8Layout's values
// int8 forms per (Transform, Q8Layout), then fp32 forms per Transform.
constexpr int kInputFormCount = kTransforms * kQ8Layouts + kTransforms;
static_assert(kInputForms + kInputFormCount <= kActivationSlots);

}  // namespace

// One activation that feeds column-parallel projections, with its transformed and quantized
// forms made once and shared by every projection that reads it (q/k/v, qkv/gate, gate/up):
// docs/format.md §7.2 "Sharing".
class Qwen35Graph::ProjectionInput {
 public:
  ProjectionInput(Backend& backend, Tensor plain) : backend_(backend), plain_(plain) {}

  int64_t width() const { return plain_.cols; }

  // The input in one form (transformed, and quantized in `layout` or fp32), made on first use,
  // with the tag of what was done to it (the graph check reads it: a cached form made with
  // another sign vector than a later projection's fails there).
  struct Form {
    Tensor tensor;
    InputTag tag;
    bool made = false;
  };

  absl::StatusOr<Form> Get(Transform t, const int8_t* signs, DType dtype, Q8Layout layout) {
    if (dtype == DType::kF32 && t == Transform::kPlain) return Form{plain_, {}, true};
    const int index = dtype == DType::kQ8
                          ? static_cast<int>(t) * kQ8Layouts + static_cast<int>(layout)
                          : kTransforms * kQ8Layouts + static_cast<int>(t);
    Form& form = forms_[index];
    if (!form.made) {
      ASSIGN_OR_RETURN(form.tensor, backend_.Activation(kInputForms + index, plain_.rows,
                                                        plain_.cols, dtype, layout));
      RETURN_IF_ERROR(backend_.Rotate(plain_, t, signs, form.tensor));
      form.tag = {t, signs};
      form.made = true;
    }
    return form;
  }

 private:
  Backend& backend_;
  Tensor plain_;
  Form forms_[kInputFormCount];
};

namespace {

Tensor Rows(Tensor t, int64_t first_row, int64_t rows) {
  return SubTensor(t, first_row * t.cols, rows, t.cols);
}

}  // namespace

Qwen35Graph::Qwen35Graph(const Model& model, Backend& backend, bool quantize_activations,
                         const ShardPlan& plan, int rank, Communicator* comm,
                         std::chrono::milliseconds collective_timeout)
    : model_(model),
      backend_(backend),
      quantize_(quantize_activations),
      plan_(plan),
      shard_(plan.rank(rank)),
      rank_(rank),
      comm_(comm),
      timeout_(collective_timeout) {
  const Qwen35Config& c = model.config();
  const int64_t hd = c.key_length, shd = c.ssm_state_size, block = model.contract().block_size;
  attention_ = {shard_.q_heads.begin, shard_.q_heads.size(), shard_.kv_heads.begin,
                shard_.kv_heads.size()};
  q_rows_ = {shard_.q_heads.begin * 2 * hd, shard_.q_heads.end * 2 * hd, nullptr};
  kv_rows_ = {shard_.kv_heads.begin * hd, shard_.kv_heads.end * hd, nullptr};
  ffn_rows_ = {shard_.ffn_blocks.begin * block, shard_.ffn_blocks.end * block, nullptr};
  vocab_rows_ = {shard_.vocab.begin, shard_.vocab.end, nullptr};
  // GatedDeltaNet channels of this rank: q and k of its key heads, v of its value heads in
  // grouped order (grouped value head g is tiled head (g % rep) · n_k + g / rep).
  const int64_t n_k = c.ssm_group_count, rep = c.ssm_time_step_rank / c.ssm_group_count;
  const int64_t key_dim = n_k * shd;
  auto tiled = [&](int64_t g) { return (g % rep) * n_k + g / rep; };
  for (int64_t part = 0; part < 2; ++part) {
    for (int64_t k = shard_.key_heads.begin; k < shard_.key_heads.end; ++k) {
      for (int64_t d = 0; d < shd; ++d) {
        qkv_index_.push_back(static_cast<int32_t>(part * key_dim + k * shd + d));
      }
    }
  }
  for (int64_t g = shard_.value_heads.begin; g < shard_.value_heads.end; ++g) {
    alpha_beta_index_.push_back(static_cast<int32_t>(tiled(g)));
    for (int64_t d = 0; d < shd; ++d) {
      qkv_index_.push_back(static_cast<int32_t>(2 * key_dim + tiled(g) * shd + d));
      gate_index_.push_back(static_cast<int32_t>(tiled(g) * shd + d));
    }
  }
  gdn_.resize(model.gdn_layers());
  for (const LayerWeights& L : model.layers()) {
    if (L.full_attention) continue;
    GdnLocal& g = gdn_[L.cache_index];
    const int64_t taps = c.ssm_conv_kernel;
    for (int32_t ch : qkv_index_) {
      g.conv_w.insert(g.conv_w.end(), L.gdn.conv + ch * taps, L.gdn.conv + (ch + 1) * taps);
    }
    for (int32_t h : alpha_beta_index_) {
      g.ssm_a.push_back(L.gdn.ssm_a[h]);
      g.dt_bias.push_back(L.gdn.dt_bias[h]);
    }
    g.params = {shard_.key_heads.size(),
                shard_.value_heads.size(),
                shd,
                taps,
                g.conv_w.data(),
                g.ssm_a.data(),
                g.dt_bias.data(),
                L.gdn.norm,
                c.rms_epsilon,
                rep,
                shard_.value_heads.begin};
  }
}

CacheGeometry Qwen35Graph::Geometry(int64_t pages, int64_t page_size, int64_t slots) const {
  return GeometryOf(model_, shard_.kv_heads.size(), shard_.key_heads.size(),
                    shard_.value_heads.size(), pages, page_size, slots);
}

CacheGeometry Qwen35Graph::GeometryOf(const Model& model, int64_t kv_heads, int64_t key_heads,
                                      int64_t value_heads, int64_t pages, int64_t page_size,
                                      int64_t slots) {
  const Qwen35Config& c = model.config();
  const int64_t shd = c.ssm_state_size;
  CacheGeometry g;
  g.pages = pages;
  g.page_size = page_size;
  g.attention_layers = std::max<int64_t>(model.attention_layers(), 1);
  g.kv_dim = kv_heads * c.key_length;
  g.slots = slots;
  g.gdn_layers = std::max<int64_t>(model.gdn_layers(), 1);
  g.conv_floats = (c.ssm_conv_kernel - 1) * (2 * key_heads + value_heads) * shd;
  g.recurrent_floats = value_heads * shd * shd;
  return g;
}

Transform Qwen35Graph::RequiredTransform(const Projection& p) {
  if (!p.folded) return Transform::kPlain;
  return p.gdn_permute ? Transform::kPermutedRotated : Transform::kRotated;
}

namespace {

const char* TransformName(Transform t) {
  switch (t) {
    case Transform::kPlain:
      return "plain";
    case Transform::kRotated:
      return "rotated";
    case Transform::kPermutedRotated:
      return "permuted and rotated";
  }
  return "?";
}

// The rotation a projection's input gets here: the contract's when its weights are folded.
Transform Rotation(const Projection& p) {
  return p.folded ? Transform::kRotated : Transform::kPlain;
}

}  // namespace

absl::Status Qwen35Graph::CheckInput(const Projection& p, const InputTag& tag,
                                     const int8_t* signs) {
  const Transform required = RequiredTransform(p);
  if (tag.transform != required) {
    return absl::InternalError(absl::StrCat("graph check: '", p.name, "' needs its input ",
                                            TransformName(required), ", got it ",
                                            TransformName(tag.transform)));
  }
  if (required != Transform::kPlain && tag.signs != signs) {
    return absl::InternalError(absl::StrCat("graph check: '", p.name,
                                            "''s input was rotated with another sign vector than "
                                            "its weights were folded with"));
  }
  return absl::OkStatus();
}

absl::Status Qwen35Graph::Project(const Projection& p, ProjectionInput& in,
                                  const RowSelection& rows, Tensor y) {
  if (p.w.cols != in.width()) {
    return absl::InternalError(absl::StrCat("'", p.name, "' takes width ", p.w.cols,
                                            ", got an activation of width ", in.width()));
  }
  if (rows.count() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(ProjectionInput::Form x,
                   in.Get(Rotation(p), p.signs, InputType(), Q8LayoutFor(p.w.format)));
  RETURN_IF_ERROR(CheckInput(p, x.tag, p.signs));
  return backend_.MatMul(p, x.tensor, rows, y);
}

absl::Status Qwen35Graph::AllGather(Tensor buffer, const std::vector<int64_t>& offsets,
                                    const std::vector<int64_t>& counts) {
  std::vector<size_t> off(offsets.begin(), offsets.end()), cnt(counts.begin(), counts.end());
  return comm_->AllGatherInPlace(rank_, buffer.f32(), off, cnt, timeout_);
}

absl::Status Qwen35Graph::RowParallel(const Projection& p, Site site, Tensor held, Span held_cols,
                                      bool aligned, bool ungroup, Tensor out) {
  const int64_t n = held.rows, cols = p.w.cols, rows = p.w.rows;
  const int ranks = plan_.ranks();
  const Span owned = plan_.OwnedColumns(cols, rank_);
  const Transform rotation = Rotation(p);
  // The GatedDeltaNet kernels write grouped order; `ungroup` puts it back in natural order.
  const bool grouped = site == Site::kGdnOutput && !ungroup;

  Tensor input = held;  // the owned columns, in the order the weights were folded in
  if (!aligned || ungroup) {
    Tensor full = held;
    if (ranks > 1) {
      // Every rank's columns, rank-major (rank r's columns are [c0, c1) of the input).
      ASSIGN_OR_RETURN(Tensor gathered, backend_.Activation(kGathered, n, cols));
      ASSIGN_OR_RETURN(full, backend_.Activation(kFullInput, n, cols));
      std::vector<int64_t> offsets, counts;
      std::vector<Span> parts;
      for (int r = 0; r < ranks; ++r) {
        const Span c =
            site == Site::kGdnOutput ? plan_.GdnOutputColumns(r) : plan_.AttentionOutputColumns(r);
        parts.push_back(c);
        offsets.push_back(n * c.begin);
        counts.push_back(n * c.size());
      }
      if (held_cols.size() > 0) {
        RETURN_IF_ERROR(backend_.PlaceColumns(
            held, SubTensor(gathered, n * held_cols.begin, n, held_cols.size()), 0));
      }
      RETURN_IF_ERROR(AllGather(gathered, offsets, counts));
      for (const Span& c : parts) {
        if (c.size() == 0) continue;
        RETURN_IF_ERROR(
            backend_.PlaceColumns(SubTensor(gathered, n * c.begin, n, c.size()), full, c.begin));
      }
    }
    if (ungroup) {
      const Qwen35Config& c = model_.config();
      ASSIGN_OR_RETURN(Tensor tiled, backend_.Activation(kGathered, n, cols));
      RETURN_IF_ERROR(backend_.Ungroup(full, c.ssm_group_count,
                                       c.ssm_time_step_rank / c.ssm_group_count, c.ssm_state_size,
                                       tiled));
      full = tiled;
    }
    ASSIGN_OR_RETURN(input, backend_.Activation(kOwnedInput, n, owned.size()));
    RETURN_IF_ERROR(backend_.CopyColumns(full, owned.begin, input));
  } else if (!(held_cols == owned)) {
    return absl::InternalError(absl::StrCat("'", p.name, "': rank ", rank_, " holds columns [",
                                            held_cols.begin, ", ", held_cols.end, "), owns [",
                                            owned.begin, ", ", owned.end, ")"));
  }

  const Span slices = plan_.RankSlices(rank_);
  std::vector<Span> windows;
  for (int64_t s = slices.begin; s < slices.end; ++s) {
    windows.push_back(plan_.SliceColumns(cols, static_cast<int>(s)));
  }
  ASSIGN_OR_RETURN(Tensor all_partials,
                   backend_.Activation(kSlicePartials, windows.size() * n, rows));
  std::vector<Tensor> partials;
  for (size_t s = 0; s < windows.size(); ++s) partials.push_back(Rows(all_partials, s * n, n));
  const int8_t* signs = p.signs != nullptr ? p.signs + owned.begin : nullptr;
  // The tag of what the input now is: its order from its producer, the rotation from here.
  InputTag tag{rotation, signs};
  if (grouped) {
    if (rotation == Transform::kPlain) {
      return absl::InternalError(absl::StrCat("graph check: '", p.name,
                                              "' is not folded but its input is in grouped order"));
    }
    tag.transform = Transform::kPermutedRotated;
  }
  ASSIGN_OR_RETURN(Tensor x, backend_.Activation(kRowParallelIn, n, owned.size(), InputType(),
                                                 Q8LayoutFor(p.w.format)));
  RETURN_IF_ERROR(backend_.Rotate(input, rotation, signs, x));
  RETURN_IF_ERROR(CheckInput(p, tag, signs));
  RETURN_IF_ERROR(backend_.MatMulSlices(p, x, owned.begin, windows, partials));
  if (ranks == 1) return backend_.TreeSum(partials, out);
  // This rank's subtree, then every rank's, and the top of the tree in rank order.
  ASSIGN_OR_RETURN(Tensor subtrees, backend_.Activation(kTreeGather, ranks * n, rows));
  RETURN_IF_ERROR(backend_.TreeSum(partials, Rows(subtrees, rank_ * n, n)));
  std::vector<int64_t> offsets, counts;
  std::vector<Tensor> tops;
  for (int r = 0; r < ranks; ++r) {
    offsets.push_back(r * n * rows);
    counts.push_back(n * rows);
    tops.push_back(Rows(subtrees, r * n, n));
  }
  RETURN_IF_ERROR(AllGather(subtrees, offsets, counts));
  return backend_.TreeSum(tops, out);
}

absl::Status Qwen35Graph::AttentionMixer(const LayerWeights& L, Tensor normed, Tensor out) {
  const int64_t n = normed.rows, hd = model_.config().key_length;
  ASSIGN_OR_RETURN(Tensor q_gate,
                   backend_.Activation(kAttnQueryGate, n, 2 * attention_.q_heads * hd));
  ASSIGN_OR_RETURN(Tensor k, backend_.Activation(kAttnKey, n, attention_.kv_heads * hd));
  ASSIGN_OR_RETURN(Tensor v, backend_.Activation(kAttnValue, n, attention_.kv_heads * hd));
  ASSIGN_OR_RETURN(Tensor attn, backend_.Activation(kAttnOut, n, attention_.q_heads * hd));
  ProjectionInput in(backend_, normed);
  RETURN_IF_ERROR(Project(L.attn.q, in, q_rows_, q_gate));
  RETURN_IF_ERROR(Project(L.attn.k, in, kv_rows_, k));
  RETURN_IF_ERROR(Project(L.attn.v, in, kv_rows_, v));
  if (attention_.q_heads > 0) {
    // Every token's K and V go into the cache before any token attends.
    RETURN_IF_ERROR(backend_.AttentionPrepare(L.attn, L.cache_index, attention_, q_gate, k, v));
    RETURN_IF_ERROR(backend_.Attention(L.cache_index, attention_, q_gate, attn));
  }
  return RowParallel(L.attn.o, Site::kPlainBasis, attn, plan_.AttentionOutputColumns(rank_),
                     plan_.AttentionOutputAligned(), /*ungroup=*/false, out);
}

absl::Status Qwen35Graph::GdnMixer(const LayerWeights& L, Tensor normed, Tensor out) {
  const GdnLocal& g = gdn_[L.cache_index];
  const int64_t n = normed.rows, nv = g.params.n_v, shd = g.params.hd;
  ASSIGN_OR_RETURN(Tensor qkv, backend_.Activation(kGdnQkv, n, g.params.conv_dim()));
  ASSIGN_OR_RETURN(Tensor u, backend_.Activation(kGdnConvOut, n, g.params.conv_dim()));
  ASSIGN_OR_RETURN(Tensor z, backend_.Activation(kGdnGate, n, nv * shd));
  ASSIGN_OR_RETURN(Tensor ab, backend_.Activation(kGdnAlphaBeta, n, 2 * nv));
  ASSIGN_OR_RETURN(Tensor gdn, backend_.Activation(kGdnOut, n, nv * shd));
  ProjectionInput in(backend_, normed);
  RETURN_IF_ERROR(Project(L.gdn.qkv, in, {0, 0, &qkv_index_}, qkv));
  RETURN_IF_ERROR(Project(L.gdn.gate, in, {0, 0, &gate_index_}, z));
  if (nv > 0) {
    // ssm_alpha / ssm_beta are not folded: they read the plain normed state (docs/format.md
    // §8.3).
    RETURN_IF_ERROR(backend_.DenseProject(L.gdn.alpha, normed, {0, 0, &alpha_beta_index_}, ab, 0));
    RETURN_IF_ERROR(backend_.DenseProject(L.gdn.beta, normed, {0, 0, &alpha_beta_index_}, ab, nv));
    RETURN_IF_ERROR(backend_.GdnConv(g.params, L.cache_index, qkv, u));
    RETURN_IF_ERROR(backend_.GdnRecurrence(g.params, L.cache_index, u, z, ab, gdn));
  }
  return RowParallel(L.gdn.out, Site::kGdnOutput, gdn, plan_.GdnOutputColumns(rank_),
                     plan_.GdnOutputAligned(), !model_.contract().gdn_v_grouped, out);
}

absl::Status Qwen35Graph::Ffn(const LayerWeights& L, Tensor normed, Tensor out) {
  const int64_t n = normed.rows, width = ffn_rows_.count();
  ASSIGN_OR_RETURN(Tensor gate, backend_.Activation(kFfnGate, n, width));
  ASSIGN_OR_RETURN(Tensor up, backend_.Activation(kFfnUp, n, width));
  ASSIGN_OR_RETURN(Tensor act, backend_.Activation(kFfnAct, n, width));
  ProjectionInput in(backend_, normed);
  RETURN_IF_ERROR(Project(L.ffn_gate, in, ffn_rows_, gate));
  RETURN_IF_ERROR(Project(L.ffn_up, in, ffn_rows_, up));
  if (width > 0) RETURN_IF_ERROR(backend_.SwiGlu(gate, up, act));
  return RowParallel(L.ffn_down, Site::kPlainBasis, act, {ffn_rows_.begin, ffn_rows_.end},
                     /*aligned=*/true, /*ungroup=*/false, out);
}

absl::Status Qwen35Graph::Logits(Tensor head_in, std::vector<float>* logits) {
  const int64_t m = head_in.rows, vocab = model_.config().vocab_size;
  ProjectionInput head(backend_, head_in);
  Tensor all;  // the whole logits: rank 0 only
  if (rank_ == 0) {
    ASSIGN_OR_RETURN(all, backend_.Activation(kLogits, m, vocab));
  }
  if (plan_.ranks() == 1) {
    RETURN_IF_ERROR(Project(model_.output(), head, vocab_rows_, all));
  } else {
    // Each rank its vocabulary rows, then every rank's, rank after rank, reassembled.
    ASSIGN_OR_RETURN(Tensor gathered, backend_.Activation(kLogitsGathered, m, vocab));
    const Tensor mine = SubTensor(gathered, m * shard_.vocab.begin, m, shard_.vocab.size());
    RETURN_IF_ERROR(Project(model_.output(), head, vocab_rows_, mine));
    std::vector<int64_t> offsets, counts;
    for (int r = 0; r < plan_.ranks(); ++r) {
      offsets.push_back(m * plan_.rank(r).vocab.begin);
      counts.push_back(m * plan_.rank(r).vocab.size());
    }
    RETURN_IF_ERROR(AllGather(gathered, offsets, counts));
    if (rank_ != 0) return absl::OkStatus();
    for (int r = 0; r < plan_.ranks(); ++r) {
      const Span v = plan_.rank(r).vocab;
      RETURN_IF_ERROR(
          backend_.PlaceColumns(SubTensor(gathered, m * v.begin, m, v.size()), all, v.begin));
    }
  }
  if (rank_ != 0) return absl::OkStatus();
  logits->resize(m * vocab);
  return backend_.ReadToHost(all, logits->data());
}

absl::Status Qwen35Graph::Run(const StepPlan& plan, std::vector<float>* logits) {
  const Qwen35Config& c = model_.config();
  const int64_t n = static_cast<int64_t>(plan.tokens.size()), H = c.embedding_length;
  const int64_t m = static_cast<int64_t>(plan.logit_tokens.size());
  RETURN_IF_ERROR(backend_.BeginStep(plan));
  ASSIGN_OR_RETURN(Tensor h, backend_.Activation(kHidden, n, H));
  ASSIGN_OR_RETURN(Tensor normed, backend_.Activation(kNormed, n, H));
  ASSIGN_OR_RETURN(Tensor mixer, backend_.Activation(kMixerOut, n, H));
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
  ASSIGN_OR_RETURN(Tensor last, backend_.Activation(kLastHidden, m, H));
  RETURN_IF_ERROR(backend_.GatherLogitRows(h, last));
  ASSIGN_OR_RETURN(Tensor head_in, backend_.Activation(kHeadIn, m, H));
  RETURN_IF_ERROR(backend_.RmsNorm(last, model_.output_norm(), c.rms_epsilon, head_in));
  return Logits(head_in, logits);
}

}  // namespace walsh
