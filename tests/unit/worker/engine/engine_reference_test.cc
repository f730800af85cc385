// Fold identity: the engine on a Prism-folded file against an independent, plainly written
// float64 forward pass over the same network unfolded (walsh-mkmodel --dense-out: plain basis,
// no rotation anywhere). docs/format.md §8 written out as straight loops.
#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_model.h"
#include "worker/engine/mrope_positions.h"
#include "worker/engine/solo_runner.h"
#include "worker/model/qwen35_config.h"

namespace walsh {
namespace {

using Vec = std::vector<double>;

class DenseReference {
 public:
  explicit DenseReference(const GgufFile& g) : g_(g), c_(*ParseQwen35Config(g)) {
    attn_k_.resize(c_.block_count);
    attn_v_.resize(c_.block_count);
    conv_hist_.resize(c_.block_count);
    state_.resize(c_.block_count);
  }

  // Logits after appending `token` at the next position, its rotary positions all `rope`.
  Vec Step(int32_t token, int64_t rope) {
    const int64_t H = c_.embedding_length;
    const float* e = W("token_embd.weight") + static_cast<int64_t>(token) * H;
    return StepRow(Vec(e, e + H), {rope, rope, rope});
  }

  // Logits after appending a row in place of a token's embedding, at rotary positions t, h, w.
  Vec StepRow(Vec h, std::array<int64_t, 3> rope) {
    const int64_t H = c_.embedding_length;
    rope_ = rope;
    for (int64_t i = 0; i < c_.block_count; ++i) {
      const std::string p = absl::StrCat("blk.", i, ".");
      const Vec a = Norm(h, W(p + "attn_norm.weight"));
      const Vec mix = c_.IsFullAttention(i) ? Attention(i, p, a) : DeltaNet(i, p, a);
      for (int64_t j = 0; j < H; ++j) h[j] += mix[j];
      const Vec b = Norm(h, W(p + "post_attention_norm.weight"));
      const Vec gate = MatVec(p + "ffn_gate.weight", b), up = MatVec(p + "ffn_up.weight", b);
      Vec act(gate.size());
      for (size_t j = 0; j < act.size(); ++j) act[j] = Silu(gate[j]) * up[j];
      const Vec down = MatVec(p + "ffn_down.weight", act);
      for (int64_t j = 0; j < H; ++j) h[j] += down[j];
    }
    return MatVec("output.weight", Norm(h, W("output_norm.weight")));
  }

 private:
  const float* W(const std::string& name) const {
    return reinterpret_cast<const float*>(g_.FindTensor(name)->data);
  }
  Vec MatVec(const std::string& name, const Vec& x) const {
    const GgufTensorInfo* t = g_.FindTensor(name);
    const int64_t cols = t->ne[0], rows = t->ne[1];
    const float* w = reinterpret_cast<const float*>(t->data);
    Vec y(rows, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) y[r] += double{w[r * cols + k]} * x[k];
    }
    return y;
  }
  Vec Norm(const Vec& x, const float* w, int64_t off = 0, int64_t n = -1) const {
    if (n < 0) n = static_cast<int64_t>(x.size());
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
    const double s = 1.0 / std::sqrt(ss / n + c_.rms_epsilon);
    Vec y(n);
    for (int64_t i = 0; i < n; ++i) y[i] = x[off + i] * s * w[i];
    return y;
  }
  static double Silu(double x) { return x / (1 + std::exp(-x)); }
  static double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
  // Interleaved M-RoPE: pair i takes t, h or w by i mod 3 within each stream's section, and
  // otherwise a fourth position, 0 (docs/vision.md §4).
  void Rope(double* x) const {
    const int64_t half = c_.rope_dimension_count / 2;
    const auto& sec = c_.rope_sections;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t s = i % (sec[0] + sec[1] + sec[2] + sec[3]);
      int64_t pos = 0;
      if (s % 3 == 0 && s < 3 * sec[0]) pos = rope_[0];
      if (s % 3 == 1 && s < 3 * sec[1]) pos = rope_[1];
      if (s % 3 == 2 && s < 3 * sec[2]) pos = rope_[2];
      const double th =
          pos * std::pow(double{c_.rope_freq_base}, -2.0 * i / c_.rope_dimension_count);
      const double x0 = x[i], x1 = x[i + half];
      x[i] = x0 * std::cos(th) - x1 * std::sin(th);
      x[i + half] = x0 * std::sin(th) + x1 * std::cos(th);
    }
  }

  Vec Attention(int64_t layer, const std::string& p, const Vec& a) {
    const int64_t hd = c_.key_length, nh = c_.head_count, nkv = c_.head_count_kv;
    const Vec qg = MatVec(p + "attn_q.weight", a);
    Vec k = MatVec(p + "attn_k.weight", a);
    const Vec v = MatVec(p + "attn_v.weight", a);
    for (int64_t m = 0; m < nkv; ++m) {
      const Vec kn = Norm(k, W(p + "attn_k_norm.weight"), m * hd, hd);
      std::copy(kn.begin(), kn.end(), k.begin() + m * hd);
      Rope(k.data() + m * hd);
    }
    attn_k_[layer].push_back(k);
    attn_v_[layer].push_back(v);
    Vec u(nh * hd);
    for (int64_t j = 0; j < nh; ++j) {
      Vec q = Norm(qg, W(p + "attn_q_norm.weight"), 2 * hd * j, hd);
      Rope(q.data());
      const int64_t m = j / (nh / nkv);
      const size_t n = attn_k_[layer].size();
      Vec score(n);
      double mx = -1e300;
      for (size_t t = 0; t < n; ++t) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += q[i] * attn_k_[layer][t][m * hd + i];
        score[t] = d / std::sqrt(double(hd));
        mx = std::max(mx, score[t]);
      }
      double sum = 0;
      for (double& s : score) sum += (s = std::exp(s - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double acc = 0;
        for (size_t t = 0; t < n; ++t) acc += score[t] / sum * attn_v_[layer][t][m * hd + i];
        u[j * hd + i] = acc * Sigmoid(qg[2 * hd * j + hd + i]);
      }
    }
    return MatVec(p + "attn_output.weight", u);
  }

  Vec DeltaNet(int64_t layer, const std::string& p, const Vec& a) {
    const int64_t nk = c_.ssm_group_count, nv = c_.ssm_time_step_rank, hd = c_.ssm_state_size;
    const int64_t conv_dim = c_.gdn_conv_dim(), K = c_.ssm_conv_kernel;
    const Vec x = MatVec(p + "attn_qkv.weight", a), z = MatVec(p + "attn_gate.weight", a);
    const Vec beta_raw = MatVec(p + "ssm_beta.weight", a),
              alpha_raw = MatVec(p + "ssm_alpha.weight", a);
    auto& hist = conv_hist_[layer];
    hist.push_back(x);
    const float* cw = W(p + "ssm_conv1d.weight");
    Vec u(conv_dim);
    for (int64_t ch = 0; ch < conv_dim; ++ch) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t t =
            static_cast<int64_t>(hist.size()) - K + k;  // tap K-1 is the current input
        if (t >= 0) acc += cw[ch * K + k] * hist[t][ch];
      }
      u[ch] = Silu(acc);
    }
    auto l2 = [&](int64_t off) {
      double ss = 0;
      for (int64_t i = 0; i < hd; ++i) ss += u[off + i] * u[off + i];
      const double s = 1 / std::max(std::sqrt(ss), double{c_.rms_epsilon});
      for (int64_t i = 0; i < hd; ++i) u[off + i] *= s;
    };
    for (int64_t h = 0; h < nk; ++h) {
      l2(h * hd);
      l2(nk * hd + h * hd);
    }
    auto& S = state_[layer];
    if (S.empty()) S.assign(nv * hd * hd, 0.0);
    const float* ssm_a = W(p + "ssm_a");
    const float* dt = W(p + "ssm_dt.bias");
    Vec n(nv * hd);
    for (int64_t h = 0; h < nv; ++h) {
      const int64_t kh = h % nk;
      const double* q = &u[kh * hd];
      const double* k = &u[nk * hd + kh * hd];
      const double* v = &u[2 * nk * hd + h * hd];
      const double beta = Sigmoid(beta_raw[h]);
      const double sp = alpha_raw[h] + dt[h] > 20 ? alpha_raw[h] + dt[h]
                                                  : std::log1p(std::exp(alpha_raw[h] + dt[h]));
      const double decay = std::exp(sp * ssm_a[h]);
      Vec o(hd);
      for (int64_t j = 0; j < hd; ++j) {
        double* Sj = &S[(h * hd + j) * hd];
        double pred = 0;
        for (int64_t i = 0; i < hd; ++i) pred += (Sj[i] *= decay) * k[i];
        const double delta = beta * (v[j] - pred);
        double acc = 0;
        for (int64_t i = 0; i < hd; ++i) acc += (Sj[i] += delta * k[i]) * q[i];
        o[j] = acc / std::sqrt(double(hd));
      }
      const Vec on = Norm(o, W(p + "ssm_norm.weight"));
      for (int64_t j = 0; j < hd; ++j) n[h * hd + j] = on[j] * Silu(z[h * hd + j]);
    }
    return MatVec(p + "ssm_out.weight", n);
  }

  const GgufFile& g_;
  const Qwen35Config c_;
  std::array<int64_t, 3> rope_ = {};
  std::vector<std::vector<Vec>> attn_k_, attn_v_, conv_hist_;
  std::vector<Vec> state_;
};

double KlDivergence(const Vec& p, const float* q) {
  const int64_t n = static_cast<int64_t>(p.size());
  double mp = p[0], mq = q[0];
  for (int64_t i = 0; i < n; ++i) mp = std::max(mp, p[i]), mq = std::max(mq, double{q[i]});
  double sp = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) sp += std::exp(p[i] - mp), sq += std::exp(q[i] - mq);
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double lp = p[i] - mp - std::log(sp), lq = q[i] - mq - std::log(sq);
    kl += std::exp(lp) * (lp - lq);
  }
  return kl;
}

// With `images`, their tokens take random rows in place of their embeddings and every token its
// M-RoPE positions.
void CheckFoldIdentity(const std::string& preset, TernaryFormat format, int tokens,
                       const std::vector<ImageSpan>& images = {}) {
  auto model = SyntheticModel::Create({.preset = preset, .format = format, .seed = 21});
  ASSERT_TRUE(model.ok());
  testing::TempDir dir;
  ASSERT_TRUE((*model)->WritePacked(dir.File("m.gguf")).ok());
  ASSERT_TRUE((*model)->WriteDense(dir.File("d.gguf")).ok());
  auto dense = GgufFile::Open(dir.File("d.gguf"));
  ASSERT_TRUE(dense.ok());

  std::mt19937 gen(4);
  std::vector<int32_t> ids(tokens);
  for (int32_t& t : ids) t = static_cast<int32_t>(gen() % (*model)->preset().config.vocab_size);
  DenseReference ref(**dense);
  std::vector<Vec> expected;
  const int64_t H = (*model)->preset().config.embedding_length;
  const std::vector<int32_t> rope = MropePositions(images, 0, tokens);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> rows;
  std::vector<int32_t> row_of(tokens, -1);
  for (const ImageSpan& image : images) {
    for (int64_t i = image.first; i < image.end(); ++i) row_of[i] = static_cast<int32_t>(i);
  }
  rows.resize(tokens * H);
  for (int i = 0; i < tokens; ++i) {
    if (row_of[i] < 0) {
      expected.push_back(ref.Step(ids[i], rope[3 * i]));
      continue;
    }
    for (int64_t j = 0; j < H; ++j) rows[i * H + j] = normal(gen);
    expected.push_back(ref.StepRow(Vec(rows.begin() + i * H, rows.begin() + (i + 1) * H),
                                   {rope[3 * i], rope[3 * i + 1], rope[3 * i + 2]}));
  }
  SequenceInput input{0, ids, /*all_logits=*/true};
  if (!images.empty()) {
    input.rope_positions = rope;
    input.embedding_of_token = row_of;
    input.embeddings = rows;
  }

  for (bool quantize : {false, true}) {
    SCOPED_TRACE(quantize ? "int8 activations" : "fp32 activations");
    auto file = LoadModelFile(dir.File("m.gguf"));
    ASSERT_TRUE(file.ok());
    auto bound = Model::Bind(std::move(*file));
    ASSERT_TRUE(bound.ok());
    auto engine =
        SoloRunner::Create(std::move(*bound), {.threads = 2, .quantize_activations = quantize});
    ASSERT_TRUE(engine.ok());
    auto seq = (*engine)->AddSequence();
    input.id = *seq;
    auto out = (*engine)->Forward({input});
    ASSERT_TRUE(out.ok()) << out.status();
    double worst_rel = 0, kl = 0;
    int checked = 0, agree = 0;
    for (int i = 0; i < tokens; ++i) {
      const Vec& r = expected[i];
      const float* got = out->RowLogits(i);
      double max_abs = 0, max_err = 0, lo = r[0], hi = r[0];
      for (size_t k = 0; k < r.size(); ++k) {
        max_abs = std::max(max_abs, std::fabs(r[k]));
        max_err = std::max(max_err, std::fabs(got[k] - r[k]));
        lo = std::min(lo, r[k]);
        hi = std::max(hi, r[k]);
      }
      worst_rel = std::max(worst_rel, max_err / max_abs);
      kl += KlDivergence(r, got);
      // Argmax must agree wherever the reference's top two are clearly apart.
      size_t top = 0, second = 1;
      if (r[1] > r[0]) std::swap(top, second);
      for (size_t k = 2; k < r.size(); ++k) {
        if (r[k] > r[top])
          second = top, top = k;
        else if (r[k] > r[second])
          second = k;
      }
      if (r[top] - r[second] > 0.01 * (hi - lo)) {
        ++checked;
        size_t best = 0;
        for (size_t k = 1; k < r.size(); ++k) best = got[k] > got[best] ? k : best;
        agree += best == top;
      }
    }
    std::printf("%s %s %s: max relative logit error %.2e, mean KL %.2e, argmax %d/%d\n",
                preset.c_str(), format == TernaryFormat::kPq2_0 ? "pq2_0" : "ptq1_0",
                quantize ? "int8" : "fp32", worst_rel, kl / tokens, agree, checked);
    if (!quantize) {
      EXPECT_LE(worst_rel, 1e-4);
    } else {
      EXPECT_LE(kl / tokens, 1e-3);
      EXPECT_EQ(agree, checked);
    }
  }
}

TEST(FoldIdentity, TinyPq2) { CheckFoldIdentity("tiny", TernaryFormat::kPq2_0, 64); }
TEST(FoldIdentity, TinyPtq1) { CheckFoldIdentity("tiny", TernaryFormat::kPtq1_0, 64); }
// Two images, one oblong, the second ending the prompt's middle: pair by pair, each stream's
// rotation and each replaced row are checked against the plain loops above.
TEST(FoldIdentity, TinyWithImages) {
  CheckFoldIdentity(
      "tiny", TernaryFormat::kPq2_0, 48,
      {{.first = 5, .grid_h = 3, .grid_w = 5}, {.first = 30, .grid_h = 2, .grid_w = 2}});
}
TEST(FoldIdentity, Small) { CheckFoldIdentity("small", TernaryFormat::kPq2_0, 12); }

}  // namespace
}  // namespace walsh
