// The resize rule, the normalization and the whole preprocessing (docs/vision.md §2): sizes and
// token counts worked from the rule by hand, halves rounding to even as the processor's Python
// does.
#include "worker/vision/image_preprocessor.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "worker/vision/smart_resize.h"

namespace walsh {
namespace {

using ::testing::HasSubstr;

struct SizeCase {
  int64_t height, width, want_height, want_width;
};

TEST(SmartResize, KeepsTheAspectWithinTheTokenLimits) {
  const std::vector<SizeCase> cases = {
      {720, 1280, 704, 1280},  // 22.5 rows of 32 round to 22 (llama.cpp rounds up: 736)
      {1200, 720, 1216, 704},  // 37.5 rounds to 38, 22.5 to 22: halves to even both ways
      {768, 768, 768, 768},    // the position table's own size
      {448, 448, 448, 448},
      {1024, 1024, 1024, 1024},
      {2048, 2048, 2048, 2048},  // exactly 4,096 tokens: the maximum, kept
      {2049, 2049, 2048, 2048},
      {3000, 4000, 1760, 2336},  // over the maximum: scaled by sqrt(area / max), floored
      {10, 10, 96, 96},          // under the minimum of 8 tokens: scaled up, ceiled (9 tokens)
      {48, 80, 96, 128},
      {200, 1, 1280, 32},   // an aspect ratio of exactly 200
      {16, 1000, 32, 736},  // a side under 16 rounds to 0: the minimum sizes it
  };
  for (const SizeCase& c : cases) {
    SCOPED_TRACE(std::to_string(c.width) + "x" + std::to_string(c.height));
    const auto size = SmartResize(c.height, c.width, 32, {});
    ASSERT_TRUE(size.ok()) << size.status();
    EXPECT_EQ(size->height, c.want_height);
    EXPECT_EQ(size->width, c.want_width);
  }
  const auto fewer = SmartResize(1024, 1024, 32, {.min_tokens = 8, .max_tokens = 256});
  ASSERT_TRUE(fewer.ok());
  EXPECT_EQ(fewer->height * fewer->width, 256 * 32 * 32);
  // The shrinking branch's floor of one factor takes a long, thin image past the maximum, as in
  // the processor.
  const auto thin = SmartResize(20, 4000, 32, {.min_tokens = 8, .max_tokens = 64});
  ASSERT_TRUE(thin.ok());
  EXPECT_EQ(thin->height, 32);
  EXPECT_EQ(thin->width, 3616);
}

TEST(SmartResize, RefusesEmptyAndExtremeAspects) {
  EXPECT_THAT(SmartResize(201, 1, 32, {}).status().message(), HasSubstr("aspect ratio above 200"));
  EXPECT_THAT(SmartResize(1, 201, 32, {}).status().message(), HasSubstr("aspect ratio above 200"));
  EXPECT_EQ(SmartResize(0, 10, 32, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

// numpy computes what the processor computes: image.astype(float64) * (1/255), stored as float32,
// then (x - mean) / std with float32 mean and std. Every byte value through each channel's mean
// and std, compared bit for bit.
TEST(NormalizeImage, EqualsNumpysRescaleThenNormalize) {
  testing::TempDir dir;
  const std::string script =
      "import numpy as np\n"
      "u = np.arange(256, dtype=np.uint8).reshape(1, 256, 1).repeat(3, axis=2)\n"
      "x = (u.astype(np.float64) * (1 / 255)).astype(np.float32)\n"
      "mean = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)\n"
      "std = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)\n"
      "y = (x - mean) / std\n"
      "y.transpose(2, 0, 1).astype('<f4').tofile('" +
      dir.File("want.f32") + "')\n";
  const auto run = testing::RunProcess({WALSH_PYTHON_BIN, "-c", script});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string want_bytes = testing::ReadFileOrDie(dir.File("want.f32"));
  RgbImage image{.width = 256, .height = 1};
  for (int v = 0; v < 256; ++v) image.rgb.insert(image.rgb.end(), 3, static_cast<uint8_t>(v));
  const PixelValues got = NormalizeImage(image, {0.48145466f, 0.4578275f, 0.40821073f},
                                         {0.26862954f, 0.26130258f, 0.27577711f});
  ASSERT_EQ(want_bytes.size(), got.planes.size() * sizeof(float));
  EXPECT_EQ(0, std::memcmp(want_bytes.data(), got.planes.data(), want_bytes.size()));
}

TEST(NormalizeImage, IsPlanarRgb) {
  RgbImage image{.width = 2, .height = 1, .rgb = {0, 128, 255, 17, 200, 64}};
  const PixelValues v = NormalizeImage(image, {0.48145466f, 0.4578275f, 0.40821073f},
                                       {0.26862954f, 0.26130258f, 0.27577711f});
  ASSERT_EQ(v.planes.size(), 6u);
  // Planar: R of both pixels, then G, then B.
  const uint8_t order[6] = {0, 17, 128, 200, 255, 64};
  const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
  const float std_[3] = {0.26862954f, 0.26130258f, 0.27577711f};
  for (int i = 0; i < 6; ++i) {
    const int c = i / 2;
    const float unit = static_cast<float>(order[i] / 255.0);
    EXPECT_EQ(v.planes[i], (unit - mean[c]) / std_[c]) << i;
  }
  const PixelValues half = NormalizeImage(image, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f});
  EXPECT_EQ(half.planes[0], -1.0f);
  EXPECT_EQ(half.planes[4], 1.0f);
}

TEST(PreprocessImage, ResizesToTheRuleAndCountsItsTokens) {
  testing::TempDir dir;
  const std::string script =
      "from PIL import Image\n"
      "Image.new('RGB', (1280, 720), (30, 60, 90)).save('" +
      dir.File("wide.png") + "')\n";
  ASSERT_EQ(testing::RunProcess({WALSH_PYTHON_BIN, "-c", script}).exit_code, 0);
  const std::string file = testing::ReadFileOrDie(dir.File("wide.png"));
  const std::vector<uint8_t> bytes(file.begin(), file.end());
  const auto pixels = PreprocessImage(bytes, {});
  ASSERT_TRUE(pixels.ok()) << pixels.status();
  EXPECT_EQ(pixels->width, 1280);
  EXPECT_EQ(pixels->height, 704);
  EXPECT_EQ(pixels->Tokens(16, 2), 880);
  // A flat colour stays flat through the bicubic: every red sample is (30/255 - 0.5) / 0.5.
  const float red = (static_cast<float>(30 / 255.0) - 0.5f) / 0.5f;
  EXPECT_EQ(pixels->planes.front(), red);
  EXPECT_EQ(pixels->planes[1280 * 704 - 1], red);
  const auto refused = PreprocessImage(bytes, {.decode = {.max_pixels = 1000}});
  EXPECT_THAT(refused.status().message(), HasSubstr("over the limit of 1000 pixels"));
}

}  // namespace
}  // namespace walsh
