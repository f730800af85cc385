// The host-and-device numerics (kernels/numerics.h, kernels/token_ops.h): accuracy against the
// C library over their ranges; the shared ops against their canonical order written out as
// plain loops; and the splits the CUDA kernels make (keys' scores in any order, a head's rows in
// any order, channels in any order, a warp's lane sums) giving those same bits.
#include "kernels/numerics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/token_ops.h"
#include "kernels/weight_format.h"

namespace walsh {
namespace {

int64_t UlpDistance(float a, float b) {
  int32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  if (x < 0) x = INT32_MIN - x;
  if (y < 0) y = INT32_MIN - y;
  return std::llabs(static_cast<int64_t>(x) - y);
}

TEST(Numerics, ExpWithinOneUlpOverItsRange) {
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> x(-103.0f, 88.7f);
  int64_t worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const float v = x(gen);
    worst = std::max(worst, UlpDistance(ExpF(v), std::exp(v)));
  }
  EXPECT_LE(worst, 1);
  EXPECT_EQ(ExpF(0.0f), 1.0f);
  EXPECT_EQ(ExpF(-200.0f), 0.0f);
  EXPECT_TRUE(std::isinf(ExpF(100.0f)));
  EXPECT_GT(ExpF(-100.0f), 0.0f);  // subnormal results round once, not to zero
  EXPECT_LE(UlpDistance(ExpF(-100.0f), std::exp(-100.0f)), 1);
}

TEST(Numerics, LogAndLog1pAccurate) {
  std::mt19937 gen(2);
  std::uniform_real_distribution<float> e(-40.0f, 40.0f);
  int64_t worst_log = 0, worst_log1p = 0;
  for (int i = 0; i < 200000; ++i) {
    const float v = std::exp(e(gen));
    worst_log = std::max(worst_log, UlpDistance(LogF(v), std::log(v)));
    worst_log1p = std::max(worst_log1p, UlpDistance(Log1pF(v * 1e-8f), std::log1p(v * 1e-8f)));
  }
  EXPECT_LE(worst_log, 2);
  EXPECT_LE(worst_log1p, 4);
  EXPECT_TRUE(std::isinf(LogF(0.0f)));
  EXPECT_TRUE(std::isnan(LogF(-1.0f)));
  EXPECT_LE(UlpDistance(LogF(1e-42f), std::log(1e-42f)), 1);  // subnormal input
}

// The vision encoder's GELUs: tanh and erf against the C library's, in double and rounded once,
// over the range where they are not yet ±1 and past it; odd, and NaN through.
TEST(Numerics, TanhAndErfWithinTwoUlp) {
  std::mt19937 gen(4);
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f), narrow(-1.0f, 1.0f);
  int64_t worst_tanh = 0, worst_erf = 0;
  for (int i = 0; i < 400000; ++i) {
    const float v = i % 2 ? wide(gen) : narrow(gen);
    worst_tanh = std::max(
        worst_tanh, UlpDistance(TanhF(v), static_cast<float>(std::tanh(static_cast<double>(v)))));
    worst_erf = std::max(
        worst_erf, UlpDistance(ErfF(v), static_cast<float>(std::erf(static_cast<double>(v)))));
    ASSERT_EQ(TanhF(-v), -TanhF(v));
    ASSERT_EQ(ErfF(-v), -ErfF(v));
  }
  EXPECT_LE(worst_tanh, 2);
  EXPECT_LE(worst_erf, 2);
  for (float v : {0.0f, 1e-30f, 1e-6f, 0.3f, 0.8f, 4.0f, 20.0f, 1e30f, INFINITY}) {
    EXPECT_LE(UlpDistance(TanhF(v), static_cast<float>(std::tanh(static_cast<double>(v)))), 2) << v;
    EXPECT_LE(UlpDistance(ErfF(v), static_cast<float>(std::erf(static_cast<double>(v)))), 2) << v;
  }
  EXPECT_TRUE(std::isnan(TanhF(NAN)));
  EXPECT_TRUE(std::isnan(ErfF(NAN)));
}

TEST(Numerics, SinCosAtRopeAngles) {
  double worst = 0;
  for (int64_t pos : {0, 1, 7, 100, 4095, 65535, 262143}) {
    for (int i = 0; i < 32; ++i) {
      const double theta = static_cast<double>(pos) * std::pow(10000000.0, -i / 32.0);
      double s, c;
      SinCos(theta, &s, &c);
      worst = std::max({worst, std::fabs(s - std::sin(theta)), std::fabs(c - std::cos(theta))});
    }
  }
  EXPECT_LT(worst, 1e-14);
}

TEST(Numerics, ActivationFunctions) {
  EXPECT_EQ(Sigmoid(0.0f), 0.5f);
  EXPECT_EQ(Silu(0.0f), 0.0f);
  EXPECT_EQ(Softplus(30.0f), 30.0f);
  for (float x : {-30.0f, -3.0f, -0.1f, 0.0f, 0.5f, 4.0f, 19.0f}) {
    EXPECT_NEAR(Softplus(x), std::log1p(std::exp(x)), 4e-7 * std::max(1.0f, std::fabs(x))) << x;
    EXPECT_NEAR(Sigmoid(x), 1.0 / (1.0 + std::exp(-x)), 1e-7) << x;
  }
}

std::vector<float> Random(int64_t n, std::mt19937& gen, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The canonical order of one head's attention, written out as plain loops over flat K and V
// rows: the shared ops, and the pieces the CUDA kernel runs in parallel, must give these bits.
// Σ term(i) for i < n as a warp sums it (docs/format.md §8.4): lane l adds the terms i ≡ l
// (mod 32) in order from +0, then each round lane l adds lane l + s, s = 16 .. 1.
template <typename Term>
float WarpOrderSum(size_t n, const Term& term) {
  float lane[32];
  for (int l = 0; l < 32; ++l) {
    lane[l] = 0.0f;
    for (size_t i = l; i < n; i += 32) lane[l] += term(i);
  }
  for (int s = 16; s > 0; s /= 2) {
    for (int l = 0; l < s; ++l) lane[l] = lane[l] + lane[l + s];
  }
  return lane[0];
}

std::vector<float> AttendWrittenOut(const std::vector<float>& q, const std::vector<const float*>& k,
                                    const std::vector<const float*>& v, float scale) {
  const size_t n = k.size(), hd = q.size();
  std::vector<float> s(n), out(hd, 0.0f);
  for (size_t t = 0; t < n; ++t) {
    float dot = 0.0f;
    for (size_t i = 0; i < hd; ++i) dot += q[i] * k[t][i];
    s[t] = dot * scale;
  }
  float mx = -INFINITY;
  for (size_t t = 0; t < n; ++t) mx = std::max(mx, s[t]);
  for (size_t t = 0; t < n; ++t) s[t] = ExpF(s[t] - mx);
  const float sum = WarpOrderSum(n, [&](size_t t) { return s[t]; });
  for (size_t i = 0; i < hd; ++i) {
    for (size_t t = 0; t < n; ++t) out[i] += (s[t] / sum) * v[t][i];
  }
  return out;
}

TEST(TokenOps, AttentionFollowsTheCanonicalOrderWholeAndInPieces) {
  std::mt19937 gen(3);
  const int64_t hd = 64, page = 16, n_keys = 45, pages = 3, row = 2 * hd;
  std::vector<float> k = Random(pages * page * row, gen), v = Random(pages * page * row, gen);
  const std::vector<int32_t> table = {2, 0, 1};
  const PagedKv<float> kv{k.data(), v.data(), table.data(), page * row, page, row, hd};
  const std::vector<float> q = Random(hd, gen);
  std::vector<const float*> krows, vrows;
  for (int64_t t = 0; t < n_keys; ++t) {
    const int64_t at = table[t / page] * page * row + (t % page) * row + hd;
    krows.push_back(k.data() + at);
    vrows.push_back(v.data() + at);
  }
  const std::vector<float> reference = AttendWrittenOut(q, krows, vrows, 0.125f);
  std::vector<float> scratch(n_keys), whole(hd);
  AttendOneHead(q.data(), hd, kv, n_keys, 0.125f, scratch.data(), whole.data());
  EXPECT_TRUE(SameBits(whole, reference));
  // As the CUDA kernel: scores by key in reverse order, one softmax, outputs by dim in reverse.
  std::vector<float> scores(n_keys), pieces(hd);
  for (int64_t t = n_keys - 1; t >= 0; --t) scores[t] = AttentionScore(q.data(), hd, kv, t, 0.125f);
  const float sum = SoftmaxNumerators(scores.data(), n_keys);
  for (int64_t i = hd - 1; i >= 0; --i) {
    pieces[i] = AttentionOutput(scores.data(), sum, kv, n_keys, i);
  }
  EXPECT_TRUE(SameBits(pieces, reference));
}

TEST(TokenOps, RmsNormSumsInThirtyTwoLanesAsAWarpDoes) {
  std::mt19937 gen(9);
  for (int64_t n : {5, 64, 1000, 5120}) {
    const std::vector<float> x = Random(n, gen, 3.0f);
    // A warp: lane l sums its strided elements, then each round lane l adds lane l + s.
    double lane[32];
    for (int l = 0; l < 32; ++l) {
      lane[l] = 0.0;
      for (int64_t i = l; i < n; i += 32) lane[l] += static_cast<double>(x[i]) * x[i];
    }
    for (int s = 16; s > 0; s /= 2) {
      for (int l = 0; l < s; ++l) lane[l] = lane[l] + lane[l + s];
    }
    const float expected = 1.0f / std::sqrt(static_cast<float>(lane[0] / n) + 1e-6f);
    EXPECT_EQ(RmsNormScale(x.data(), n, 1e-6f), expected) << n;
    double plain = 0;
    for (float v : x) plain += static_cast<double>(v) * v;
    EXPECT_NEAR(RmsNormScale(x.data(), n, 1e-6f), 1.0 / std::sqrt(plain / n + 1e-6), 1e-6) << n;
  }
}

TEST(TokenOps, Fp16KvAttentionInPiecesEqualsTheWholeHeadAndTracksFp32) {
  std::mt19937 gen(7);
  const int64_t hd = 64, page = 16, n_keys = 40, pages = 3, row = hd;
  const std::vector<float> k = Random(pages * page * row, gen), v = Random(pages * page * row, gen);
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i)
    KvStoreRow(&k[i], 1, &k16[i]), KvStoreRow(&v[i], 1, &v16[i]);
  const std::vector<int32_t> table = {1, 2, 0};
  const PagedKv<uint16_t> kv16{k16.data(), v16.data(), table.data(), page * row, page, row, 0};
  const PagedKv<float> kv32{k.data(), v.data(), table.data(), page * row, page, row, 0};
  const std::vector<float> q = Random(hd, gen);
  std::vector<float> scratch(n_keys), whole(hd), exact(hd);
  AttendOneHead(q.data(), hd, kv16, n_keys, 0.125f, scratch.data(), whole.data());
  AttendOneHead(q.data(), hd, kv32, n_keys, 0.125f, scratch.data(), exact.data());
  std::vector<float> scores(n_keys), pieces(hd);
  for (int64_t t = n_keys - 1; t >= 0; --t) {
    scores[t] = AttentionScore(q.data(), hd, kv16, t, 0.125f);
  }
  const float sum = SoftmaxNumerators(scores.data(), n_keys);
  for (int64_t i = hd - 1; i >= 0; --i) {
    pieces[i] = AttentionOutput(scores.data(), sum, kv16, n_keys, i);
  }
  EXPECT_TRUE(SameBits(whole, pieces));
  for (int64_t i = 0; i < hd; ++i) EXPECT_NEAR(whole[i], exact[i], 2e-3) << i;
}

TEST(TokenOps, GdnStepInPiecesEqualsTheSequentialStep) {
  std::mt19937 gen(4);
  const int64_t n_k = 2, n_v = 4, hd = 32, taps = 4, conv_dim = 2 * n_k * hd + n_v * hd;
  const std::vector<float> conv_w = Random(conv_dim * taps, gen, 0.3f);
  const std::vector<float> a = Random(n_v, gen), dt = Random(n_v, gen), norm = Random(hd, gen);
  std::vector<float> ssm_a(n_v);
  for (int64_t h = 0; h < n_v; ++h) ssm_a[h] = -std::exp(a[h]);
  const GdnLayerParams p{
      n_k, n_v, hd, taps, conv_w.data(), ssm_a.data(), dt.data(), norm.data(), 1e-6f, n_v / n_k, 0};
  std::vector<float> state1 = Random((taps - 1) * conv_dim, gen), state2 = state1;
  std::vector<float> S1 = Random(n_v * hd * hd, gen, 0.1f), S2 = S1;
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> x = Random(conv_dim, gen), z = Random(n_v * hd, gen);
    const std::vector<float> alpha = Random(n_v, gen), beta = Random(n_v, gen);
    std::vector<float> u1(conv_dim), out1(n_v * hd);
    GdnConvStep(p, x.data(), state1.data(), u1.data());
    for (int64_t h = 0; h < n_v; ++h) {
      GdnHeadStep(p, u1.data(), z.data(), alpha.data(), beta.data(), h, S1.data(), out1.data());
    }
    // As the CUDA kernels: channels in reverse, heads in reverse, each head's rows in reverse.
    std::vector<float> u2(conv_dim), out2(n_v * hd);
    for (int64_t ch = conv_dim - 1; ch >= 0; --ch) {
      u2[ch] = GdnConvChannel(p, x.data(), state2.data(), ch);
    }
    for (int64_t h = 2 * n_k - 1; h >= 0; --h) L2NormInPlace(u2.data() + h * hd, hd, p.eps);
    for (int64_t h = n_v - 1; h >= 0; --h) {
      float b, decay;
      GdnHeadGates(p, alpha.data(), beta.data(), h, &b, &decay);
      float* o = out2.data() + h * hd;
      for (int64_t j = hd - 1; j >= 0; --j)
        o[j] = GdnHeadRow(p, u2.data(), h, b, decay, j, S2.data());
      const float scale = RmsNormScale(o, hd, p.eps);
      for (int64_t j = hd - 1; j >= 0; --j) o[j] = GdnGateOutput(p, o, scale, z.data(), h, j);
    }
    EXPECT_TRUE(SameBits(u1, u2)) << step;
    EXPECT_TRUE(SameBits(out1, out2)) << step;
    EXPECT_TRUE(SameBits(state1, state2)) << step;
    EXPECT_TRUE(SameBits(S1, S2)) << step;
  }
}

TEST(TokenOps, LongSumsRunInThirtyTwoLanesAsAWarpDoes) {
  std::mt19937 gen(12);
  for (int64_t n : {1, 31, 32, 33, 100, 5120}) {
    const std::vector<float> x = Random(n, gen, 2.0f), w = Random(n, gen, 0.5f);
    EXPECT_EQ(LaneSum(x.data(), n), WarpOrderSum(n, [&](size_t i) { return x[i]; })) << n;
    float lanes[kSumLanes];
    for (int l = 0; l < kSumLanes; ++l) lanes[l] = SumLane(x.data(), n, l);
    EXPECT_EQ(CombineLanes(lanes), LaneSum(x.data(), n)) << n;
    // Dense rows in each stored format, whole and lane by lane.
    std::vector<uint16_t> bf16(n), fp16(n);
    for (int64_t i = 0; i < n; ++i) bf16[i] = FloatToBf16(w[i]), fp16[i] = FloatToFp16(w[i]);
    const struct {
      DenseFormat format;
      const void* data;
    } rows[] = {{DenseFormat::kF32, w.data()},
                {DenseFormat::kBf16, bf16.data()},
                {DenseFormat::kF16, fp16.data()}};
    for (const auto& row : rows) {
      const float expected = WarpOrderSum(n, [&](size_t i) {
        const float wi = row.format == DenseFormat::kF32    ? w[i]
                         : row.format == DenseFormat::kBf16 ? Bf16ToFloat(bf16[i])
                                                            : Fp16ToFloat(fp16[i]);
        return wi * x[i];
      });
      EXPECT_EQ(DenseRowDot(row.format, row.data, 0, n, x.data()), expected) << n;
      for (int l = 0; l < kSumLanes; ++l) {
        lanes[l] = DenseRowDotLane(row.format, row.data, 0, n, x.data(), l);
      }
      EXPECT_EQ(CombineLanes(lanes), expected) << n;
    }
  }
}

TEST(TokenOps, GdnRowSumsRunInThirtyTwoLanesWholeAndLaneByLane) {
  std::mt19937 gen(13);
  const int64_t n_k = 1, n_v = 1, hd = 128;
  const std::vector<float> u = Random(2 * n_k * hd + n_v * hd, gen), norm = Random(hd, gen);
  const std::vector<float> a = {-0.5f}, dt = {0.1f};
  const GdnLayerParams p{n_k, n_v, hd, 4, nullptr, a.data(), dt.data(), norm.data(), 1e-6f, 1, 0};
  const std::vector<float> S0 = Random(hd * hd, gen, 0.1f);
  const float beta = 0.7f, decay = 0.9f;
  const float* qq = u.data();
  const float* kk = u.data() + hd;
  const float* vv = u.data() + 2 * hd;
  for (int64_t j : {0, 5, 127}) {
    // Written out: decay, the prediction in warp order, the update, the output in warp order.
    std::vector<float> S1 = S0;
    float* row = S1.data() + j * hd;
    for (int64_t i = 0; i < hd; ++i) row[i] *= decay;
    const float pred = WarpOrderSum(hd, [&](size_t i) { return row[i] * kk[i]; });
    const float delta = beta * (vv[j] - pred);
    for (int64_t i = 0; i < hd; ++i) row[i] += delta * kk[i];
    const float expected =
        RsqrtF(static_cast<float>(hd)) * WarpOrderSum(hd, [&](size_t i) { return row[i] * qq[i]; });
    std::vector<float> S2 = S0;
    EXPECT_EQ(GdnHeadRow(p, u.data(), 0, beta, decay, j, S2.data()), expected) << j;
    EXPECT_TRUE(SameBits(S1, S2)) << j;
    // As the CUDA kernel: a warp's lanes, each touching only its own elements.
    std::vector<float> S3 = S0;
    float* Sj = S3.data() + j * hd;
    float lanes[kSumLanes];
    for (int l = kSumLanes - 1; l >= 0; --l) lanes[l] = GdnDecayPredictLane(Sj, kk, decay, hd, l);
    const float delta3 = beta * (vv[j] - CombineLanes(lanes));
    for (int l = kSumLanes - 1; l >= 0; --l) {
      lanes[l] = GdnUpdateOutputLane(Sj, kk, qq, delta3, hd, l);
    }
    EXPECT_EQ(RsqrtF(static_cast<float>(hd)) * CombineLanes(lanes), expected) << j;
    EXPECT_TRUE(SameBits(S1, S3)) << j;
  }
}

// Quantized KV rows: a group's values within half a step of the scale, and the edges every
// device must store alike: an all-zero group, a magnitude past fp16's range (the scale
// saturates, the codes clamp), NaN and infinities (NaN stores code 0).
TEST(TokenOps, QuantizedKvRowsRoundTripAndStoreEdgesAlike) {
  std::mt19937 gen(21);
  const std::vector<float> x = Random(64, gen, 3.0f);
  KvQ8 q8[2];
  KvQ4 q4[2];
  KvStoreRow(x.data(), 64, q8);
  KvStoreRow(x.data(), 64, q4);
  for (int64_t i = 0; i < 64; ++i) {
    const KvQ8& g8 = q8[i / 32];
    const KvQ4& g4 = q4[i / 32];
    EXPECT_LE(std::abs(KvLoadAt(q8, i) - x[i]), 0.5f * Fp16ToFloat(g8.d) * 1.01f) << i;
    EXPECT_LE(std::abs(KvLoadAt(q4, i) - x[i]), 0.5f * Fp16ToFloat(g4.d) * 1.01f) << i;
  }
  std::vector<float> edge(32, 0.0f);
  KvStoreRow(edge.data(), 32, q8);
  EXPECT_EQ(KvLoadAt(q8, 5), 0.0f);
  edge[0] = 1e9f, edge[1] = -1e9f, edge[2] = NAN, edge[3] = INFINITY, edge[4] = 1.0f;
  KvStoreRow(edge.data(), 32, q8);
  EXPECT_EQ(Fp16ToFloat(q8[0].d), 65504.0f);
  EXPECT_EQ(q8[0].q[0], 127);
  EXPECT_EQ(q8[0].q[1], -127);
  EXPECT_EQ(q8[0].q[2], 0);
  EXPECT_EQ(q8[0].q[3], 127);
  KvStoreRow(edge.data(), 32, q4);
  EXPECT_EQ(KvLoadAt(q4, 0), 7 * Fp16ToFloat(q4[0].d));
  EXPECT_EQ(KvLoadAt(q4, 1), -8 * Fp16ToFloat(q4[0].d));
  EXPECT_EQ(KvLoadAt(q4, 2), 0.0f);
}

TEST(WeightFormat, TheTableKnowsExactlyTheTernaryTypes) {
  ASSERT_NE(FindTernaryFormat(142), nullptr);
  ASSERT_NE(FindTernaryFormat(143), nullptr);
  EXPECT_EQ(FindTernaryFormat(142)->block_bytes, 34);
  EXPECT_EQ(FindTernaryFormat(143)->block_bytes, 28);
  EXPECT_DOUBLE_EQ(FindTernaryFormat(142)->bits_per_weight, 2.125);
  EXPECT_DOUBLE_EQ(FindTernaryFormat(143)->bits_per_weight, 1.75);
  EXPECT_EQ(FormatTraits(TernaryFormat::kPq2_0).ggml_type, 142u);
  for (uint32_t other : {0u, 1u, 8u, 30u, 36u, 141u, 144u, 0xffffffffu}) {
    EXPECT_EQ(FindTernaryFormat(other), nullptr) << other;
  }
}

}  // namespace
}  // namespace walsh
