// The reference transform against PrismML's own output (fixtures/prism, docs/format.md §10 item 1):
// sha256 of our fp32 output must equal the oracle's, bit for bit.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/sha256.h"
#include "gtest/gtest.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/isa.h"
#include "kernels/hadamard_ref.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"
#include "tools/mkmodel/real_signs.h"

namespace walsh {
namespace {

using testing::ReadFileOrDie;
using testing::TestDataPath;

std::vector<float> ReadF32(const std::string& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

TEST(HadamardConformance, MatchesPrismOracleDigests) {
  const nlohmann::json spec = nlohmann::json::parse(
      ReadFileOrDie(TestDataPath("prism/ternary_bonsai_hadamard_transform.json")));
  auto released = LoadReleasedHadamard(TestDataPath("prism/ternary_bonsai_hadamard.json"));
  ASSERT_TRUE(released.ok()) << released.status();
  const int64_t block = spec["block_size"].get<int64_t>();
  const int64_t n_v = spec["gdn_geometry"]["value_heads"].get<int64_t>();
  const int64_t n_k = spec["gdn_geometry"]["groups"].get<int64_t>();
  const int64_t rows = spec["input"]["rows"].get<int64_t>();
  ASSERT_EQ(spec["cases"].size(), 5u);
  for (const auto& c : spec["cases"]) {
    const std::string name = c["name"], mode = c["mode"];
    const int64_t width = c["width"].get<int64_t>();
    SCOPED_TRACE(name);
    const std::string input =
        ReadFileOrDie(TestDataPath("prism/transform_input_w" + std::to_string(width) + ".f32"));
    ASSERT_EQ(Sha256Hex(input.data(), input.size()), c["x_sha256"].get<std::string>());
    const std::vector<float> x = ReadF32(input);
    ASSERT_EQ(static_cast<int64_t>(x.size()), rows * width);
    const int8_t* signs = released->signs.at(width).data();
    std::vector<float> out(x.size()), tmp(width);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * width;
      float* yr = out.data() + r * width;
      if (mode == "signs") {
        SignedFwhtForwardRef(xr, signs, width, block, yr);
      } else if (mode == "gdn") {
        GdnPermuteRef(xr, n_k, n_v / n_k, width / n_v, tmp.data());
        SignedFwhtForwardRef(tmp.data(), signs, width, block, yr);
      } else if (mode == "permute") {
        GdnPermuteRef(xr, n_k, n_v / n_k, width / n_v, yr);
      } else if (mode == "inverse") {
        SignedFwhtInverseRef(xr, signs, width, block, yr);
      } else {
        FAIL() << "unknown mode " << mode;
      }
    }
    EXPECT_EQ(Sha256Hex(out.data(), out.size() * 4), c["out_sha256"].get<std::string>());
    // The fast path (kernels/cpu) must hold the same digests.
    std::vector<float> fast(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * width;
      float* yr = fast.data() + r * width;
      if (mode == "signs") {
        SignedFwhtForward(BestCpuIsa(), xr, signs, width, block, yr);
      } else if (mode == "gdn") {
        GdnPermuteRef(xr, n_k, n_v / n_k, width / n_v, tmp.data());
        SignedFwhtForward(BestCpuIsa(), tmp.data(), signs, width, block, yr);
      } else if (mode == "permute") {
        GdnPermuteRef(xr, n_k, n_v / n_k, width / n_v, yr);
      } else {
        SignedFwhtInverse(BestCpuIsa(), xr, signs, width, block, yr);
      }
    }
    EXPECT_EQ(Sha256Hex(fast.data(), fast.size() * 4), c["out_sha256"].get<std::string>())
        << CpuIsaName(BestCpuIsa());
    EXPECT_FLOAT_EQ(out[0], c["out_first8"][0].get<float>());
  }
}

TEST(Hadamard, TransformIsOrthogonalAndSelfInverse) {
  std::mt19937 gen(7);
  std::normal_distribution<float> dist;
  for (int64_t block : {1, 2, 128, 1024}) {
    const int64_t n = block * 3;
    std::vector<float> x(n), signs_f(n);
    std::vector<int8_t> signs(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = dist(gen);
      signs[i] = gen() & 1 ? 1 : -1;
    }
    std::vector<float> y(n), back(n);
    SignedFwhtForwardRef(x.data(), signs.data(), n, block, y.data());
    double nx = 0, ny = 0;
    for (int64_t i = 0; i < n; ++i) {
      nx += double{x[i]} * x[i];
      ny += double{y[i]} * y[i];
    }
    EXPECT_NEAR(nx, ny, 1e-4 * nx) << "block " << block;
    SignedFwhtInverseRef(y.data(), signs.data(), n, block, back.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(back[i], x[i], 1e-5) << "block " << block;
  }
}

TEST(Hadamard, BlockMatchesDefinition) {
  // H[r][c] = (-1)^popcount(r & c) / sqrt(B), applied to unit vectors.
  const int64_t block = 16;
  for (int64_t c = 0; c < block; ++c) {
    std::vector<float> v(block, 0.0f);
    v[c] = 1.0f;
    FwhtBlockRef(v.data(), block);
    for (int64_t r = 0; r < block; ++r) {
      const float expected = (__builtin_popcountll(r & c) % 2 ? -1.0f : 1.0f) / 4.0f;
      EXPECT_EQ(v[r], expected) << r << "," << c;
    }
  }
}

TEST(Hadamard, GdnPermuteDirection) {
  // out[(k*rep + r)*hd + d] = in[(r*n_k + k)*hd + d]: tiled head r*n_k + k lands at grouped k*rep +
  // r.
  const int64_t n_k = 4, rep = 3, hd = 2;
  std::vector<float> in(n_k * rep * hd), out(in.size()), back(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  GdnPermuteRef(in.data(), n_k, rep, hd, out.data());
  // Tiled head 1 (r = 0, k = 1) becomes grouped head 3 (k = 1, r = 0).
  EXPECT_EQ(out[3 * hd], in[1 * hd]);
  // Tiled head 4 (r = 1, k = 0) becomes grouped head 1 (k = 0, r = 1).
  EXPECT_EQ(out[1 * hd + 1], in[4 * hd + 1]);
  GdnUnpermuteRef(out.data(), n_k, rep, hd, back.data());
  EXPECT_EQ(back, in);
}

}  // namespace
}  // namespace walsh
