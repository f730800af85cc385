// The vision encoder against a float64 forward pass written here from docs/vision.md §3, on the
// synthetic projectors of walsh-mkmodel (tiny and small presets; F32, F16, BF16 and Q8_0 weights):
// the image rows agree within 1e-4, relative to the largest. Grids that match the position table
// and grids that resample it; square and oblong. The rows are the same bits on any number of
// threads. A CUDA placement without a device is refused by name.
#include "worker/vision/vision_encoder.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/pixel_pattern.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_mmproj.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_file.h"
#include "worker/model/mmproj_config.h"
#include "worker/vision/vision_model.h"

namespace walsh {
namespace {

using ::testing::HasSubstr;
using ::walsh::testing::PixelPattern;

// float64 throughout; the tensors decoded here from their bits, apart from the encoder's loader.
class VisionReference {
 public:
  VisionReference(const GgufFile& file, const MmprojConfig& config) : f_(file), c_(config) {}

  std::vector<double> Encode(const PixelValues& px) const {
    const int64_t p = c_.patch_size, d = c_.embedding_length, side = c_.position_side();
    const int64_t gh = px.height / p, gw = px.width / p;
    // Patches in merge-window order: token (Y, X) in raster order, then its 2x2 in raster order.
    std::vector<std::pair<int64_t, int64_t>> at;
    for (int64_t Y = 0; Y < gh / 2; ++Y)
      for (int64_t X = 0; X < gw / 2; ++X)
        for (int64_t k = 0; k < 4; ++k) at.push_back({2 * Y + k / 2, 2 * X + k % 2});
    const int64_t n = static_cast<int64_t>(at.size());
    const auto w0 = T("v.patch_embd.weight"), w1 = T("v.patch_embd.weight.1");
    const auto pb = T("v.patch_embd.bias"), pos = T("v.position_embd.weight");
    std::vector<std::vector<double>> x(n, std::vector<double>(d));
    for (int64_t s = 0; s < n; ++s) {
      const auto [r, col] = at[s];
      for (int64_t o = 0; o < d; ++o) {
        double e = pb[o];
        for (int64_t ch = 0; ch < 3; ++ch)
          for (int64_t ky = 0; ky < p; ++ky)
            for (int64_t kx = 0; kx < p; ++kx) {
              const int64_t wi = ((o * 3 + ch) * p + ky) * p + kx;
              e += (w0[wi] + w1[wi]) *
                   px.planes[(ch * px.height + r * p + ky) * px.width + col * p + kx];
            }
        // Bilinear over the table with aligned corners.
        const double sr = r * double(side - 1) / std::max<int64_t>(gh - 1, 1);
        const double sc = col * double(side - 1) / std::max<int64_t>(gw - 1, 1);
        for (int64_t i : {int64_t(std::floor(sr)), int64_t(std::floor(sr)) + 1}) {
          for (int64_t j : {int64_t(std::floor(sc)), int64_t(std::floor(sc)) + 1}) {
            const double wr = 1 - std::fabs(sr - i), wc = 1 - std::fabs(sc - j);
            const int64_t ti = std::min(i, side - 1), tj = std::min(j, side - 1);
            e += wr * wc * pos[(ti * side + tj) * d + o];
          }
        }
        x[s][o] = e;
      }
    }
    const int64_t heads = c_.head_count, hd = d / heads, ff = c_.feed_forward_length;
    for (int64_t layer = 0; layer < c_.block_count; ++layer) {
      const std::string b = "v.blk." + std::to_string(layer) + ".";
      std::vector<std::vector<double>> q(n), k(n), v(n);
      for (int64_t s = 0; s < n; ++s) {
        const auto a = Norm(x[s], T(b + "ln1.weight"), T(b + "ln1.bias"));
        const auto qkv = Affine(a, T(b + "attn_qkv.weight"), T(b + "attn_qkv.bias"));
        q[s].assign(qkv.begin(), qkv.begin() + d);
        k[s].assign(qkv.begin() + d, qkv.begin() + 2 * d);
        v[s].assign(qkv.begin() + 2 * d, qkv.end());
        for (int64_t h = 0; h < heads; ++h) {
          Rotate(&q[s][h * hd], hd, at[s].first, at[s].second);
          Rotate(&k[s][h * hd], hd, at[s].first, at[s].second);
        }
      }
      std::vector<std::vector<double>> mixed(n, std::vector<double>(d));
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < n; ++i) {
          std::vector<double> score(n);
          double top = -INFINITY, total = 0;
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t e = 0; e < hd; ++e) score[j] += q[i][h * hd + e] * k[j][h * hd + e];
            score[j] /= std::sqrt(double(hd));
            top = std::max(top, score[j]);
          }
          for (double& sj : score) total += (sj = std::exp(sj - top));
          for (int64_t j = 0; j < n; ++j)
            for (int64_t e = 0; e < hd; ++e)
              mixed[i][h * hd + e] += score[j] / total * v[j][h * hd + e];
        }
      }
      for (int64_t s = 0; s < n; ++s) {
        const auto o = Affine(mixed[s], T(b + "attn_out.weight"), T(b + "attn_out.bias"));
        for (int64_t e = 0; e < d; ++e) x[s][e] += o[e];
        auto u = Affine(Norm(x[s], T(b + "ln2.weight"), T(b + "ln2.bias")), T(b + "ffn_up.weight"),
                        T(b + "ffn_up.bias"));
        for (double& t : u)
          t = 0.5 * t * (1 + std::tanh(std::sqrt(2 / M_PI) * (t + 0.044715 * t * t * t)));
        const auto down = Affine(u, T(b + "ffn_down.weight"), T(b + "ffn_down.bias"));
        for (int64_t e = 0; e < d; ++e) x[s][e] += down[e];
      }
      (void)ff;
    }
    std::vector<double> out;
    for (int64_t t = 0; t < n / 4; ++t) {
      std::vector<double> z;
      for (int64_t k = 0; k < 4; ++k) {
        const auto y = Norm(x[4 * t + k], T("v.post_ln.weight"), T("v.post_ln.bias"));
        z.insert(z.end(), y.begin(), y.end());
      }
      auto h = Affine(z, T("mm.0.weight"), T("mm.0.bias"));
      for (double& e : h) e = 0.5 * e * (1 + std::erf(e / std::sqrt(2.0)));
      const auto row = Affine(h, T("mm.2.weight"), T("mm.2.bias"));
      out.insert(out.end(), row.begin(), row.end());
    }
    return out;
  }

 private:
  std::vector<double> T(const std::string& name) const {
    const GgufTensorInfo* t = f_.FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    std::vector<double> v(t->n_elements);
    for (uint64_t i = 0; i < t->n_elements; ++i) {
      if (t->type == kGgmlF32) {
        float f;
        std::memcpy(&f, t->data + 4 * i, 4);
        v[i] = f;
        continue;
      }
      if (t->type == kGgmlQ8_0) {  // blocks of 32: an IEEE half scale, then 32 int8
        const uint8_t* block = t->data + (i / 32) * 34;
        uint16_t scale;
        std::memcpy(&scale, block, 2);
        v[i] = Half(scale) * static_cast<int8_t>(block[2 + i % 32]);
        continue;
      }
      uint16_t h;
      std::memcpy(&h, t->data + 2 * i, 2);
      if (t->type == kGgmlBf16) {
        const uint32_t bits = uint32_t{h} << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        v[i] = f;
      } else {
        v[i] = Half(h);
      }
    }
    return v;
  }
  // IEEE half: sign, 5 exponent bits, 10 mantissa bits (no infinities or NaNs here).
  static double Half(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -mag : mag;
  }
  std::vector<double> Norm(const std::vector<double>& x, const std::vector<double>& w,
                           const std::vector<double>& b) const {
    double mean = 0, var = 0;
    for (double e : x) mean += e / x.size();
    for (double e : x) var += (e - mean) * (e - mean) / x.size();
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      y[i] = (x[i] - mean) / std::sqrt(var + double(c_.layer_norm_epsilon)) * w[i] + b[i];
    return y;
  }
  static std::vector<double> Affine(const std::vector<double>& x, const std::vector<double>& w,
                                    const std::vector<double>& b) {
    std::vector<double> y(b);
    for (size_t o = 0; o < b.size(); ++o)
      for (size_t i = 0; i < x.size(); ++i) y[o] += w[o * x.size() + i] * x[i];
    return y;
  }
  // Pairs (j, j + hd/2): the first quarter turns with the row, the second with the column.
  static void Rotate(double* v, int64_t hd, int64_t row, int64_t col) {
    for (int64_t j = 0; j < hd / 2; ++j) {
      const int64_t quarter = hd / 4, f = j % quarter;
      const double angle =
          double(j < quarter ? row : col) * std::pow(10000.0, -double(f) / quarter);
      const double a = v[j], b = v[j + hd / 2];
      v[j] = a * std::cos(angle) - b * std::sin(angle);
      v[j + hd / 2] = b * std::cos(angle) + a * std::sin(angle);
    }
  }

  const GgufFile& f_;
  MmprojConfig c_;
};

struct Case {
  const char* preset;
  uint32_t type;
  int64_t height, width;
};

TEST(VisionEncoder, AgreesWithTheFloat64Reference) {
  const Case cases[] = {
      {"tiny", kGgmlF32, 64, 64},    // the position table's own 4 x 4 grid
      {"tiny", kGgmlF16, 96, 64},    // resampled, oblong
      {"tiny", kGgmlBf16, 32, 128},  // one merged row
      {"small", kGgmlF16, 64, 96},   // a feed-forward width that is not a multiple of 32
      {"small", kGgmlBf16, 32, 32},  // a single merged token
      {"small", kGgmlQ8_0, 64, 64},  // Q8_0 where rows are whole blocks, F16 elsewhere
  };
  testing::TempDir dir;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.preset) + " " + GgmlTypeName(c.type) + " " +
                 std::to_string(c.width) + "x" + std::to_string(c.height));
    const std::string path = dir.File("p.gguf");
    ASSERT_TRUE(
        WriteSyntheticMmproj(
            {.preset = c.preset, .text_embedding_length = 48, .weight_type = c.type, .seed = 5},
            path)
            .ok());
    auto file = GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    auto config = ParseMmprojConfig(**file);
    ASSERT_TRUE(config.ok()) << config.status();
    auto weights = VisionWeights::Load(**file, *config);
    ASSERT_TRUE(weights.ok()) << weights.status();
    const VisionEncoder encoder(std::move(*weights));
    const PixelValues px = PixelPattern(c.height, c.width);
    const auto rows = encoder.Encode(px);
    ASSERT_TRUE(rows.ok()) << rows.status();
    const std::vector<double> want = VisionReference(**file, *config).Encode(px);
    ASSERT_EQ(rows->size(), want.size());
    ASSERT_EQ(static_cast<int64_t>(want.size()), (c.height / 32) * (c.width / 32) * 48);
    double largest = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      largest = std::max(largest, std::fabs(want[i]));
      worst = std::max(worst, std::fabs((*rows)[i] - want[i]));
    }
    EXPECT_GT(largest, 0.0);
    EXPECT_LE(worst, 1e-4 * largest) << "largest " << largest;
  }
}

TEST(VisionEncoder, NeitherThreadsNorKernelPathsChangeABit) {
  testing::TempDir dir;
  ASSERT_TRUE(
      WriteSyntheticMmproj({.preset = "small", .text_embedding_length = 48}, dir.File("p.gguf"))
          .ok());
  auto file = GgufFile::Open(dir.File("p.gguf"));
  ASSERT_TRUE(file.ok());
  auto config = ParseMmprojConfig(**file);
  ASSERT_TRUE(config.ok());
  const VisionEncoder encoder(*VisionWeights::Load(**file, *config));
  const PixelValues px = PixelPattern(96, 64);
  const auto alone = encoder.Encode(px);
  ASSERT_TRUE(alone.ok());
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    const auto pooled = encoder.Encode(px, &pool);
    ASSERT_TRUE(pooled.ok());
    ASSERT_EQ(pooled->size(), alone->size());
    EXPECT_EQ(0, std::memcmp(pooled->data(), alone->data(), alone->size() * sizeof(float)))
        << threads << " threads";
  }
  // Nor the kernel path: the portable one gives the same bits as the fastest.
  const VisionEncoder portable(*VisionWeights::Load(**file, *config), CpuIsa::kScalar);
  const auto scalar = portable.Encode(px);
  ASSERT_TRUE(scalar.ok());
  ASSERT_EQ(scalar->size(), alone->size());
  EXPECT_EQ(0, std::memcmp(scalar->data(), alone->data(), alone->size() * sizeof(float)))
      << CpuIsaName(BestCpuIsa());
}

TEST(VisionEncoder, RefusesPixelsOffTheGrid) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteSyntheticMmproj({.text_embedding_length = 48}, dir.File("p.gguf")).ok());
  auto file = GgufFile::Open(dir.File("p.gguf"));
  ASSERT_TRUE(file.ok());
  auto config = ParseMmprojConfig(**file);
  ASSERT_TRUE(config.ok());
  const VisionEncoder encoder(*VisionWeights::Load(**file, *config));
  EXPECT_THAT(encoder.Encode(PixelPattern(48, 64)).status().message(),
              HasSubstr("not positive multiples of 32"));
  PixelValues short_planes = PixelPattern(32, 64);
  short_planes.planes.pop_back();
  EXPECT_THAT(encoder.Encode(short_planes).status().message(),
              HasSubstr("the image's planes hold 6143 values, not 3 x 64 x 32 = 6144"));
}

// The CUDA placement where no CUDA device answers, or in a build without CUDA: refused at load,
// naming the device and the file (skipped where a device answers: cuda_vision_encoder_test's).
TEST(VisionModel, TheCudaPlacementWithoutADeviceIsRefusedByName) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteSyntheticMmproj({.text_embedding_length = 48}, dir.File("p.gguf")).ok());
  auto gpu = VisionModel::Load(dir.File("p.gguf"), 48, {.cuda = true, .cuda_device = 0});
  if (gpu.ok()) GTEST_SKIP() << "a CUDA device answers";
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition) << gpu.status();
  EXPECT_THAT(gpu.status().message(), HasSubstr("the vision encoder on cuda:0: "));
  EXPECT_THAT(gpu.status().message(), HasSubstr("p.gguf"));
}

}  // namespace
}  // namespace walsh
