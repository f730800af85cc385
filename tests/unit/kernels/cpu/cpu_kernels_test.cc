// CPU kernel paths against the scalar reference: bit-identical on random inputs at every width
// the presets and the 27B shape use; batch invariance at the kernel level.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/block_types.h"
#include "kernels/cpu/f32_matmul.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/query_block_attention.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/float_convert.h"
#include "kernels/hadamard_ref.h"
#include "kernels/ternary_codec_ref.h"
#include "kernels/weight_format.h"

namespace walsh {
namespace {

constexpr int64_t kWidths[] = {256, 384, 1024, 1536, 2816, 5120, 6144, 17408};

// Every path this build and CPU have, the scalar one first.
std::vector<CpuIsa> AllIsas() {
  std::vector<CpuIsa> out = {CpuIsa::kScalar};
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni, CpuIsa::kAvx512Vbmi}) {
    if (CpuSupports(isa)) out.push_back(isa);
  }
  return out;
}

std::vector<CpuIsa> FastIsas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni, CpuIsa::kAvx512Vbmi}) {
    if (CpuSupports(isa)) out.push_back(isa);
  }
  return out;
}

// Random packed rows; PQ2_0 includes code 3 (+2d), which the container allows.
std::vector<uint8_t> RandomWeights(TernaryFormat type, int64_t rows, int64_t cols,
                                   std::mt19937& gen) {
  const int64_t nb = rows * cols / 128;
  std::vector<uint8_t> out;
  uint8_t codes[128];
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  for (int64_t b = 0; b < nb; ++b) {
    if (type == TernaryFormat::kPq2_0) {
      for (uint8_t& c : codes) c = gen() % 4;
      block_pq2_0 blk;
      PackBlockPq2_0(codes, FloatToFp16(scale(gen)), &blk);
      const auto* p = reinterpret_cast<const uint8_t*>(&blk);
      out.insert(out.end(), p, p + sizeof blk);
    } else {
      for (uint8_t& c : codes) c = gen() % 3;
      block_ptq1_0 blk;
      PackBlockPtq1_0(codes, FloatToFp16(scale(gen)), &blk);
      const auto* p = reinterpret_cast<const uint8_t*>(&blk);
      out.insert(out.end(), p, p + sizeof blk);
    }
  }
  return out;
}

std::vector<float> RandomActivations(int64_t n, std::mt19937& gen) {
  std::normal_distribution<float> dist;
  std::vector<float> x(n);
  for (float& v : x) v = dist(gen);
  x[n / 3] = 9.0f;  // an outlier, as real activations have
  return x;
}

TEST(TernaryMatMul, EveryIsaEqualsScalarBitForBit) {
  std::mt19937 gen(11);
  if (FastIsas().empty() && !WALSH_X86_KERNELS) {
    GTEST_SKIP() << "a scalar-only build (WALSH_NATIVE_ISA=OFF): no other path to compare";
  }
  ASSERT_FALSE(FastIsas().empty()) << "x86-64 without AVX2: nothing to compare";
  for (TernaryFormat type : {TernaryFormat::kPq2_0, TernaryFormat::kPtq1_0}) {
    for (int64_t cols : kWidths) {
      SCOPED_TRACE(testing::Message() << FormatTraits(type).name << " cols " << cols);
      const int64_t rows = 5, tokens = 3;
      const std::vector<uint8_t> w = RandomWeights(type, rows, cols, gen);
      const TernaryWeights tw{type, w.data(), rows, cols};
      const std::vector<float> x = RandomActivations(tokens * cols, gen);
      std::vector<Q8Block128> q(tokens * cols / 128);
      for (int64_t t = 0; t < tokens; ++t) {
        QuantizeRowQ8(x.data() + t * cols, cols, Q8LayoutFor(type), &q[t * cols / 128]);
      }
      std::vector<float> ref(tokens * rows), got(tokens * rows);
      TernaryMatMulQ8Scalar(TernaryProduct::Whole(tw, q.data(), tokens, ref.data(), rows), 0, rows);
      for (CpuIsa isa : FastIsas()) {
        TernaryMatMulQ8(isa, tw, q.data(), tokens, got.data(), rows, 0, rows);
        ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * 4)) << CpuIsaName(isa);
      }
      // One token at a time gives the same bits as three at once.
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<float> one(rows);
        TernaryMatMulQ8(BestCpuIsa(), tw, q.data() + t * cols / 128, 1, one.data(), rows, 0, rows);
        ASSERT_EQ(0, std::memcmp(one.data(), ref.data() + t * rows, rows * 4));
      }
      // Int8 activations stay close to the fp32 product.
      std::vector<float> exact(tokens * rows);
      TernaryMatMulF32(tw, x.data(), tokens, exact.data(), rows, 0, rows);
      double err = 0, norm = 0;
      for (size_t i = 0; i < exact.size(); ++i) {
        err += (ref[i] - exact[i]) * double(ref[i] - exact[i]);
        norm += exact[i] * double(exact[i]);
      }
      EXPECT_LT(std::sqrt(err / norm), 0.02);
    }
  }
}

// The scalar reference is the combine order docs/format.md §8.4 writes down, computed here from
// the codec's own unpacking and the activations in element order: per group g of block b,
// acc_g = fma(float(Σ (code − 1) · q), dw · dx, acc_g); then ((a0 + a1) + (a2 + a3)) + ((a4 +
// a5) + (a6 + a7)).
float DocumentedOrder(TernaryFormat type, const uint8_t* row, const Q8Block128* x, int64_t nb) {
  const Q8Layout layout = Q8LayoutFor(type);
  float acc[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t codes[128];
    uint16_t d16;
    if (type == TernaryFormat::kPq2_0) {
      const auto& blk = reinterpret_cast<const block_pq2_0*>(row)[b];
      UnpackBlockPq2_0(blk, codes);
      d16 = blk.d;
    } else {
      const auto& blk = reinterpret_cast<const block_ptq1_0*>(row)[b];
      UnpackBlockPtq1_0(blk, codes);
      d16 = blk.d;
    }
    int8_t q[128];
    for (int i = 0; i < 128; ++i) q[Q8ElementAt(layout, i)] = x[b].qs[i];
    for (int g = 0; g < 8; ++g) {
      int32_t isum = 0;
      for (int e = 16 * g; e < 16 * g + 16; ++e) isum += (codes[e] - 1) * q[e];
      const float scale = Fp16ToFloat(d16) * x[b].d[Q8GroupLane(layout, g)];
      acc[g] = std::fma(static_cast<float>(isum), scale, acc[g]);
    }
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

TEST(TernaryMatMul, ScalarIsTheDocumentedOrder) {
  std::mt19937 gen(3);
  for (TernaryFormat type : {TernaryFormat::kPq2_0, TernaryFormat::kPtq1_0}) {
    const int64_t rows = 4, cols = 5120, nb = cols / 128;
    const std::vector<uint8_t> w = RandomWeights(type, rows, cols, gen);
    const TernaryWeights tw{type, w.data(), rows, cols};
    const std::vector<float> x = RandomActivations(cols, gen);
    std::vector<Q8Block128> q(nb);
    QuantizeRowQ8(x.data(), cols, Q8LayoutFor(type), q.data());
    std::vector<float> y(rows);
    TernaryMatMulQ8Scalar(TernaryProduct::Whole(tw, q.data(), 1, y.data(), rows), 0, rows);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(y[r], DocumentedOrder(type, w.data() + r * tw.row_bytes(), q.data(), nb))
          << FormatTraits(type).name << " row " << r;
    }
  }
}

// Every row-tile and token-tile shape of the fast kernels (remainders of 4- and 2-row tiles,
// token tiles of every size up to and past their widths, row chunks) equals the scalar
// reference bit for bit.
TEST(TernaryMatMul, EveryTileShapeEqualsScalar) {
  std::mt19937 gen(8);
  for (TernaryFormat type : {TernaryFormat::kPq2_0, TernaryFormat::kPtq1_0}) {
    const int64_t rows = 37, cols = 384, nb = cols / 128;
    const std::vector<uint8_t> w = RandomWeights(type, rows, cols, gen);
    const TernaryWeights tw{type, w.data(), rows, cols};
    for (int64_t tokens = 1; tokens <= 19; ++tokens) {
      const std::vector<float> x = RandomActivations(tokens * cols, gen);
      std::vector<Q8Block128> q(tokens * nb);
      QuantizeRowQ8(x.data(), tokens * cols, Q8LayoutFor(type), q.data());
      std::vector<float> ref(tokens * rows);
      TernaryMatMulQ8Scalar(TernaryProduct::Whole(tw, q.data(), tokens, ref.data(), rows), 0, rows);
      for (CpuIsa isa : FastIsas()) {
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {3, 30}, {5, 6}}) {
          std::vector<float> got(tokens * rows, -1.0f);
          TernaryMatMulQ8(isa, tw, q.data(), tokens, got.data(), rows, r0, r1);
          for (int64_t t = 0; t < tokens; ++t) {
            for (int64_t r = r0; r < r1; ++r) {
              ASSERT_EQ(got[t * rows + r], ref[t * rows + r])
                  << FormatTraits(type).name << " " << CpuIsaName(isa) << " tokens " << tokens
                  << " rows [" << r0 << ", " << r1 << ") row " << r << " token " << t;
            }
          }
        }
      }
    }
  }
}

// Segments (a row-parallel product's slices) and row selections (a column-parallel shard) on
// every ISA: each segment equals the scalar reference's, and the selected rows are the whole
// product's rows.
TEST(TernaryMatMul, SegmentsAndRowSelectionsOnEveryIsa) {
  std::mt19937 gen(6);
  for (TernaryFormat type : {TernaryFormat::kPq2_0, TernaryFormat::kPtq1_0}) {
    const int64_t rows = 6, cols = 1024, tokens = 2, nb = cols / 128;
    const std::vector<uint8_t> w = RandomWeights(type, rows, cols, gen);
    const TernaryWeights tw{type, w.data(), rows, cols};
    const std::vector<float> x = RandomActivations(tokens * cols, gen);
    std::vector<Q8Block128> q(tokens * nb);
    for (int64_t t = 0; t < tokens; ++t) {
      QuantizeRowQ8(x.data() + t * cols, cols, Q8LayoutFor(type), &q[t * nb]);
    }
    std::vector<float> whole(tokens * rows);
    TernaryMatMulQ8Scalar(TernaryProduct::Whole(tw, q.data(), tokens, whole.data(), rows), 0, rows);
    // Rows 4, 1, 3 of the whole product, into a dense 3-column output.
    const std::vector<int32_t> pick = {4, 1, 3};
    TernaryProduct sel = TernaryProduct::Whole(tw, q.data(), tokens, nullptr, 3);
    sel.row_index = pick.data();
    // Blocks [2, 8) of x only, in three segments [2, 3), [3, 3), [3, 8).
    TernaryProduct seg = TernaryProduct::Whole(tw, q.data() + 2, tokens, nullptr, rows);
    seg.x_stride = nb;
    seg.x_first_block = 2;
    seg.n_segments = 3;
    const int64_t bounds[4] = {2, 3, 3, 8};
    std::vector<float> ref_seg(3 * tokens * rows);
    for (int s = 0; s < 3; ++s) {
      seg.segment_begin[s] = bounds[s];
      seg.segment_end[s] = bounds[s + 1];
      seg.y[s] = ref_seg.data() + s * tokens * rows;
    }
    TernaryMatMulQ8Scalar(seg, 0, rows);
    for (int64_t i = 0; i < tokens * rows; ++i) EXPECT_EQ(ref_seg[tokens * rows + i], 0.0f);
    for (CpuIsa isa : AllIsas()) {
      std::vector<float> got(3 * tokens);
      sel.y[0] = got.data();
      TernaryMatMulQ8(isa, sel, 0, 3);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int i = 0; i < 3; ++i) EXPECT_EQ(got[t * 3 + i], whole[t * rows + pick[i]]);
      }
      std::vector<float> got_seg(3 * tokens * rows);
      TernaryProduct mine = seg;
      for (int s = 0; s < 3; ++s) mine.y[s] = got_seg.data() + s * tokens * rows;
      TernaryMatMulQ8(isa, mine, 0, rows);
      EXPECT_EQ(0, std::memcmp(got_seg.data(), ref_seg.data(), ref_seg.size() * 4));
    }
  }
}

TEST(TernaryMatMul, F32PathEqualsDecodedDot) {
  std::mt19937 gen(5);
  const int64_t rows = 3, cols = 384;
  for (TernaryFormat type : {TernaryFormat::kPq2_0, TernaryFormat::kPtq1_0}) {
    const std::vector<uint8_t> w = RandomWeights(type, rows, cols, gen);
    const std::vector<float> x = RandomActivations(cols, gen);
    std::vector<float> y(rows), dec(cols);
    TernaryMatMulF32({type, w.data(), rows, cols}, x.data(), 1, y.data(), rows, 0, rows);
    for (int64_t r = 0; r < rows; ++r) {
      if (type == TernaryFormat::kPq2_0) {
        DequantizeRowPq2_0Ref(reinterpret_cast<const block_pq2_0*>(w.data()) + r * 3, dec.data(),
                              cols);
      } else {
        DequantizeRowPtq1_0Ref(reinterpret_cast<const block_ptq1_0*>(w.data()) + r * 3, dec.data(),
                               cols);
      }
      double dot = 0, mag = 0;
      for (int64_t i = 0; i < cols; ++i) {
        dot += double(dec[i]) * x[i];
        mag += std::fabs(double(dec[i]) * x[i]);
      }
      EXPECT_NEAR(y[r], dot, 1e-5 * mag);
    }
  }
}

TEST(Q8Activation, MatchesQ8_0Numerics) {
  std::vector<float> x(128);
  for (int i = 0; i < 128; ++i) x[i] = static_cast<float>(i - 64) / 8.0f;
  Q8Block128 natural;
  QuantizeRowQ8(x.data(), 128, Q8Layout::kNatural, &natural);
  // Sub-block 0 holds -8 .. -4.125: d = 8 / 127 rounded to fp16.
  EXPECT_EQ(natural.d[0], Fp16ToFloat(FloatToFp16(8.0f / 127.0f)));
  EXPECT_EQ(natural.qs[0], -127);
  for (Q8Layout layout : {Q8Layout::kPq2Planes, Q8Layout::kPtq1Lanes}) {
    Q8Block128 b;
    QuantizeRowQ8(x.data(), 128, layout, &b);
    std::set<int> elements;
    for (int i = 0; i < 128; ++i) {
      EXPECT_EQ(b.qs[i], natural.qs[Q8ElementAt(layout, i)]);
      elements.insert(Q8ElementAt(layout, i));
      // Int32 lane L of every 32-byte quarter holds elements of the lane's group.
      EXPECT_EQ(Q8ElementAt(layout, i) / 16, Q8LaneGroup(layout, (i / 4) % 8)) << i;
    }
    EXPECT_EQ(elements.size(), 128u);
    // Each group's Σq and its sub-block's scale sit in the group's lane.
    for (int g = 0; g < 8; ++g) {
      int32_t sum = 0;
      for (int j = 16 * g; j < 16 * g + 16; ++j) sum += natural.qs[j];
      EXPECT_EQ(b.minus_sum[Q8GroupLane(layout, g)], -sum) << "group " << g;
      EXPECT_EQ(natural.minus_sum[g], -sum);
      EXPECT_EQ(b.d[Q8GroupLane(layout, g)], natural.d[2 * (g / 2)]);
      EXPECT_EQ(Q8LaneGroup(layout, Q8GroupLane(layout, g)), g);
    }
  }
}

// The CPU's interleaved loops over the shared per-token ops give the shared code's bits.
TEST(CpuOps, GdnHeadStepFastEqualsSharedOnEveryIsa) {
  std::mt19937 gen(4);
  std::normal_distribution<float> dist;
  auto fill = [&](std::vector<float>& v, float scale) {
    for (float& x : v) x = scale * dist(gen);
  };
  for (int64_t hd : {16, 20, 128}) {
    const int64_t n_k = 2, n_v = 4;
    std::vector<float> ssm_a(n_v), dt_bias(n_v), norm_w(hd);
    fill(ssm_a, 1.0f);
    for (float& a : ssm_a) a = -std::fabs(a);
    fill(dt_bias, 1.0f);
    fill(norm_w, 1.0f);
    GdnLayerParams p{n_k, n_v, hd, 4, nullptr, ssm_a.data(), dt_bias.data(), norm_w.data(), 1e-6f};
    p.rep = n_v / n_k;
    std::vector<float> u(p.conv_dim()), z(n_v * hd), ab(2 * n_v), state(n_v * hd * hd);
    fill(u, 0.3f);
    fill(z, 1.0f);
    fill(ab, 1.0f);
    fill(state, 0.1f);
    for (CpuIsa isa : AllIsas()) {
      std::vector<float> s_ref = state, s_got = state, o_ref(n_v * hd), o_got(n_v * hd);
      for (int step = 0; step < 3; ++step) {
        for (int64_t h = 0; h < n_v; ++h) {
          GdnHeadStep(p, u.data(), z.data(), ab.data(), ab.data() + n_v, h, s_ref.data(),
                      o_ref.data());
          GdnHeadStepFast(isa, p, u.data(), z.data(), ab.data(), ab.data() + n_v, h, s_got.data(),
                          o_got.data());
        }
        ASSERT_EQ(0, std::memcmp(s_ref.data(), s_got.data(), s_ref.size() * 4))
            << "hd " << hd << " " << CpuIsaName(isa);
        ASSERT_EQ(0, std::memcmp(o_ref.data(), o_got.data(), o_ref.size() * 4))
            << "hd " << hd << " " << CpuIsaName(isa);
      }
    }
  }
}

// The vision encoder's float32 product: the documented lane order (kernels/cpu/f32_matmul.h) on
// the scalar path, and every other path equal to it bit for bit, over tails of `in`, partial
// micro-blocks and tiles that split the rows and outputs anywhere.
TEST(F32MatMul, ScalarIsTheDocumentedOrderAndEveryIsaEqualsIt) {
  std::mt19937 gen(21);
  std::normal_distribution<float> dist;
  int sequential_differs = 0;
  for (const int64_t in : {int64_t{8}, int64_t{13}, int64_t{1157}}) {
    for (const int64_t n : {int64_t{1}, int64_t{5}, int64_t{11}}) {
      const int64_t out = 13;
      std::vector<float> x(n * in), w(out * in), b(out);
      for (float& v : x) v = dist(gen);
      for (float& v : w) v = dist(gen);
      for (float& v : b) v = dist(gen);
      std::vector<float> want(n * out);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t o = 0; o < out; ++o) {
          float lanes[kF32MatMulLanes] = {};
          const int64_t whole = in / kF32MatMulLanes * kF32MatMulLanes;
          for (int64_t k = 0; k < in; ++k) {
            lanes[k < whole ? k % kF32MatMulLanes : k - whole] += x[i * in + k] * w[o * in + k];
          }
          want[i * out + o] = CombineF32MatMulLanes(lanes) + b[o];
          float sequential = b[o];
          for (int64_t k = 0; k < in; ++k) sequential += x[i * in + k] * w[o * in + k];
          sequential_differs += sequential != want[i * out + o];
        }
      }
      for (const CpuIsa isa : AllIsas()) {
        // Tiles of 1..6 rows and 1..5 outputs: every partial block on every path.
        for (const auto& [tile_rows, tile_cols] :
             {std::pair<int64_t, int64_t>{n, out}, {2, 5}, {6, 1}, {1, 4}, {5, 3}}) {
          std::vector<float> y(n * out, -1.0f);
          for (int64_t i0 = 0; i0 < n; i0 += tile_rows) {
            for (int64_t o0 = 0; o0 < out; o0 += tile_cols) {
              F32MatMulTileRun(isa, x.data(), in, w.data(), b.data(), out,
                               {i0, std::min(n, i0 + tile_rows), o0, std::min(out, o0 + tile_cols)},
                               y.data());
            }
          }
          EXPECT_EQ(0, std::memcmp(y.data(), want.data(), want.size() * sizeof(float)))
              << CpuIsaName(isa) << " in " << in << " rows " << n << " tile " << tile_rows << "x"
              << tile_cols;
        }
      }
    }
  }
  EXPECT_GT(sequential_differs, 0);  // the order is seen: a plain running sum would fail
}

TEST(CpuOps, DenseRowsDotEqualsShared) {
  std::mt19937 gen(9);
  std::normal_distribution<float> dist;
  const int64_t rows = 13;
  // 320: the AVX2 path's whole chunks of 32; 300: its fallback to the shared code.
  for (const int64_t cols : {int64_t{320}, int64_t{300}}) {
    std::vector<float> f32(rows * cols), x(cols);
    for (float& v : f32) v = dist(gen);
    for (float& v : x) v = dist(gen);
    std::vector<uint16_t> half(rows * cols), bf16(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) {
      half[i] = FloatToFp16(f32[i]);
      uint32_t bits;
      std::memcpy(&bits, &f32[i], 4);
      bf16[i] = static_cast<uint16_t>(bits >> 16);
    }
    const std::vector<int64_t> pick = {12, 0, 5, 5, 7, 1, 2, 3, 4, 11, 10};
    for (auto [format, w] : {std::pair<DenseFormat, const void*>{DenseFormat::kF32, f32.data()},
                             {DenseFormat::kF16, half.data()},
                             {DenseFormat::kBf16, bf16.data()}}) {
      std::vector<float> got(pick.size());
      DenseRowsDot(format, w, pick.data(), pick.size(), cols, x.data(), got.data());
      for (size_t i = 0; i < pick.size(); ++i) {
        EXPECT_EQ(got[i], DenseRowDot(format, w, pick[i], cols, x.data())) << i;
      }
      // Eight tokens as vector lanes: token t's input is x shifted by t.
      std::vector<float> xs(cols + 8), y8(8 * pick.size());
      for (int64_t c = 0; c < cols + 8; ++c) xs[c] = dist(gen);
      DenseRowsDot8Tokens(BestCpuIsa(), format, w, pick.data(), pick.size(), cols, xs.data(), 1,
                          y8.data(), pick.size());
      for (int t = 0; t < 8; ++t) {
        for (size_t i = 0; i < pick.size(); ++i) {
          EXPECT_EQ(y8[t * pick.size() + i], DenseRowDot(format, w, pick[i], cols, xs.data() + t))
              << "token " << t << " row " << i;
        }
      }
    }
  }
}

template <typename T>
void CheckAttention(std::mt19937& gen, int64_t hd) {
  std::normal_distribution<float> dist;
  const int64_t kv_heads = 2, page = 4, pages = 12, keys = 41;
  const int64_t row = kv_heads * hd, units = row / KvValuesPerUnit<T>, page_stride = page * units;
  std::vector<T> k(pages * page_stride), v(pages * page_stride);
  std::vector<float> kx(row), vx(row);
  for (int64_t position = 0; position < pages * page; ++position) {
    for (int64_t i = 0; i < row; ++i) kx[i] = dist(gen), vx[i] = dist(gen);
    KvStoreRow(kx.data(), row, &k[position * units]);
    KvStoreRow(vx.data(), row, &v[position * units]);
  }
  const std::vector<int32_t> table = {3, 0, 6, 1, 5, 2, 4, 11, 8, 10, 7, 9};
  const PagedKv<T> kv{k.data(), v.data(), table.data(),           page_stride,
                      page,     units,    hd / KvValuesPerUnit<T>};  // the second KV head
  std::vector<float> q(hd);
  for (float& x : q) x = dist(gen);
  // 41 keys: a whole chunk of the softmax's 32 sum lanes, and a tail.
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{25}, keys}) {
    std::vector<float> s_ref(n), s_got(n), o_ref(hd), o_got(hd);
    AttendOneHead(q.data(), hd, kv, n, 0.125f, s_ref.data(), o_ref.data());
    for (CpuIsa isa : AllIsas()) {
      AttendOneHeadFast(isa, q.data(), hd, kv, n, 0.125f, s_got.data(), o_got.data());
      EXPECT_EQ(0, std::memcmp(o_ref.data(), o_got.data(), hd * 4))
          << n << " keys " << CpuIsaName(isa);
    }
  }
}

TEST(CpuOps, AttendOneHeadFastEqualsSharedOnEveryIsa) {
  std::mt19937 gen(12);
  CheckAttention<float>(gen, 40);
  CheckAttention<float>(gen, 72);   // the vision tower's heads: values in two passes (64 + 8)
  CheckAttention<float>(gen, 256);  // the text model's: four passes
  CheckAttention<uint16_t>(gen, 40);
  CheckAttention<KvQ8>(gen, 64);
  CheckAttention<KvQ4>(gen, 64);
}

// The vision encoder's attention of a block of queries: each query's output is AttendOneHead's
// over the same keys and values (and nothing past it written), on every path, for partial
// panels, groups of 4, 3, 2 and 1 queries, value
// chunks (48 keys), heads whose values take one pass or three (200 and 256 wide), and scores
// wide enough that some weights underflow to zero.
TEST(QueryBlockAttention, EveryQueryEqualsAttendOneHeadOnEveryIsa) {
  std::mt19937 gen(21);
  std::normal_distribution<float> dist;
  for (int64_t hd : {int64_t{36}, int64_t{64}, int64_t{72}, int64_t{200}, int64_t{256}}) {
    for (int64_t n :
         {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{49}, int64_t{130}}) {
      const int64_t q_stride = 3 * hd + 5, out_stride = hd + 3, queries = 7;
      std::vector<float> keys(n * hd), values(n * (hd + 1)), q(queries * q_stride);
      for (float& x : keys) x = dist(gen);
      for (float& x : values) x = dist(gen);
      for (int64_t j = 0; j < queries; ++j) {
        const float spread = j == 2 ? 40.0f : 1.0f;  // query 2's weights mostly underflow
        for (int64_t i = 0; i < hd; ++i) q[j * q_stride + i] = spread * dist(gen);
      }
      std::vector<float> panels(KeyPanelFloats(n, hd));
      PackKeyPanels(keys.data(), hd, n, hd, panels.data());
      const QueryBlockHead head{panels.data(), values.data(), hd + 1, n, hd};
      // The reference reads the keys and values where they are, as one page.
      const int32_t only_page = 0;
      std::vector<float> k_rows(std::max<int64_t>(1, n) * (hd + 1));
      for (int64_t t = 0; t < n; ++t) std::copy_n(&keys[t * hd], hd, &k_rows[t * (hd + 1)]);
      const PagedKv<float> kv{k_rows.data(),           values.data(), &only_page, 0,
                              std::max<int64_t>(1, n), hd + 1,        0};
      std::vector<float> want(queries * out_stride), s(std::max<int64_t>(1, n));
      for (int64_t j = 0; j < queries; ++j) {
        AttendOneHead(&q[j * q_stride], hd, kv, n, 0.125f, s.data(), &want[j * out_stride]);
      }
      for (CpuIsa isa : AllIsas()) {
        for (int64_t block : {int64_t{1}, int64_t{4}, int64_t{6}, queries}) {
          std::vector<float> got(queries * out_stride, -7.0f);
          std::vector<float> scores(block * KeyPanelCount(n) * kKeyPanel);
          for (int64_t j0 = 0; j0 < queries; j0 += block) {
            AttendQueryBlock(isa, head, &q[j0 * q_stride], q_stride, std::min(block, queries - j0),
                             0.125f, scores.data(), &got[j0 * out_stride], out_stride);
          }
          for (int64_t j = 0; j < queries; ++j) {
            EXPECT_EQ(0, std::memcmp(&want[j * out_stride], &got[j * out_stride], hd * 4))
                << CpuIsaName(isa) << " hd " << hd << " keys " << n << " query " << j << " block "
                << block;
            for (int64_t i = hd; i < out_stride; ++i) {
              EXPECT_EQ(got[j * out_stride + i], -7.0f) << "written past the head, query " << j;
            }
          }
        }
      }
    }
  }
}

TEST(CpuOps, SwiGluFastEqualsSharedOnEveryIsa) {
  std::mt19937 gen(13);
  std::vector<float> gate, up;
  // Every range of ExpF(-g): ordinary, the clamps' edges, over- and underflow, subnormal
  // results, infinities and NaN.
  for (float g :
       {0.0f,   -0.0f,  1.0f,   -1.0f,   87.0f, -87.0f, 88.7f,    -88.8f,    100.0f, -100.0f,
        103.9f, 104.0f, 126.0f, -126.0f, 3e38f, -3e38f, INFINITY, -INFINITY, NAN,    1e-30f}) {
    gate.push_back(g);
  }
  std::uniform_real_distribution<float> wide(-120.0f, 120.0f);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int i = 0; i < 4000; ++i) gate.push_back(i % 2 ? wide(gen) : normal(gen));
  for (size_t i = 0; i < gate.size(); ++i) up.push_back(normal(gen));
  std::vector<float> ref(gate.size()), got(gate.size());
  SwiGlu(gate.data(), up.data(), gate.size(), ref.data());
  for (CpuIsa isa : AllIsas()) {
    for (size_t off : {size_t{0}, size_t{3}}) {
      SwiGluFast(isa, gate.data() + off, up.data() + off, gate.size() - off, got.data() + off);
      for (size_t i = off; i < gate.size(); ++i) {
        ASSERT_EQ(0, std::memcmp(&ref[i], &got[i], 4))
            << CpuIsaName(isa) << " g " << gate[i] << ": " << ref[i] << " vs " << got[i];
      }
    }
  }
}

TEST(Q8Activation, FastPathEqualsReferenceOnEveryIsa) {
  std::mt19937 gen(14);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  const int64_t n = 128 * 24;
  std::vector<float> x(n);
  for (float& v : x) v = dist(gen);
  // Sub-blocks whose scale is 1 (max 127), so exact halves and their neighbours meet the
  // rounding: 2.5, -3.5, 0.49999997, 126.5 ...
  for (int s = 0; s < 4; ++s) {
    float* sub = x.data() + 32 * s;
    sub[0] = 127.0f;
    const float halves[] = {2.5f,   -3.5f,   0.5f,       -0.5f, 0.49999997f, -0.49999997f,
                            126.5f, -126.5f, 1.5000001f, -0.0f, 0.0f,        64.49999f};
    for (int j = 0; j < 12; ++j) sub[1 + j] = halves[j];
  }
  x[128 * 5 + 3] = NAN;  // NaN in a sub-block: skipped by the maximum, clamped to -127
  x[128 * 6 + 40] = INFINITY;
  x[128 * 7 + 70] = -INFINITY;
  for (int j = 0; j < 32; ++j) x[128 * 8 + j] = 0.0f;  // an all-zero sub-block
  x[128 * 9 + 1] = 1e-40f;                             // a subnormal maximum
  for (Q8Layout layout : {Q8Layout::kNatural, Q8Layout::kPq2Planes, Q8Layout::kPtq1Lanes}) {
    std::vector<Q8Block128> ref(n / 128), got(n / 128);
    QuantizeRowQ8(x.data(), n, layout, ref.data());
    for (CpuIsa isa : AllIsas()) {
      QuantizeRowQ8Fast(isa, x.data(), n, layout, got.data());
      for (int64_t b = 0; b < n / 128; ++b) {
        ASSERT_EQ(0, std::memcmp(&ref[b], &got[b], sizeof(Q8Block128)))
            << CpuIsaName(isa) << " layout " << static_cast<int>(layout) << " block " << b;
      }
    }
  }
}

TEST(Hadamard, FastPathEqualsReferenceBitForBit) {
  std::mt19937 gen(2);
  std::vector<int8_t> signs(17408);
  for (int8_t& s : signs) s = gen() & 1 ? 1 : -1;
  for (int64_t block : {8, 16, 128, 256, 1024}) {
    for (int64_t n : {block, 3 * block, 17408 / block * block}) {
      if (n == 0) continue;
      const std::vector<float> x = RandomActivations(n, gen);
      std::vector<float> ref(n), fast(n), iref(n), ifast(n);
      SignedFwhtForwardRef(x.data(), signs.data(), n, block, ref.data());
      SignedFwhtInverseRef(x.data(), signs.data(), n, block, iref.data());
      for (CpuIsa isa : AllIsas()) {
        SignedFwhtForward(isa, x.data(), signs.data(), n, block, fast.data());
        SignedFwhtInverse(isa, x.data(), signs.data(), n, block, ifast.data());
        ASSERT_EQ(0, std::memcmp(ref.data(), fast.data(), n * 4)) << block << " " << n;
        ASSERT_EQ(0, std::memcmp(iref.data(), ifast.data(), n * 4)) << block << " " << n;
      }
    }
  }
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, 3, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1);
    }
  }
}

}  // namespace
}  // namespace walsh
