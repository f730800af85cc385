// The vision encoder on a CUDA device against the CPU encoder: the same image rows bit for bit
// (their shared numerics make this the contract, not a tolerance), over the synthetic projectors'
// presets and weight types, grids that match the position table and grids that resample it,
// attention's queries in one launch and in many, encodes from several threads at once; both loaded
// the way walsh-worker --mmproj loads a projector (VisionModel). The linear layer's tail past the
// last chunk of 8 inputs is not reached here (every preset's widths are multiples of 8):
// gpu_check's 13 x 77 -> 45 case covers it. Skips where no CUDA device answers; the refusal of
// the CUDA placement without one is vision_encoder_test's.
#include "worker/vision/cuda_vision_encoder.h"

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/cuda_device.h"
#include "tests/util/pixel_pattern.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_mmproj.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_file.h"
#include "worker/model/mmproj_config.h"
#include "worker/vision/vision_model.h"
#include "worker/vision/vision_weights.h"

namespace walsh {
namespace {

using ::testing::HasSubstr;
using ::walsh::testing::PixelPattern;

constexpr int64_t kTextWidth = 48;

void ExpectSameBits(const std::vector<float>& want, const std::vector<float>& got) {
  ASSERT_EQ(want.size(), got.size());
  size_t differ = 0;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) {
      ++differ;
      worst = std::max(worst, std::fabs(double{want[i]} - got[i]));
    }
  }
  EXPECT_EQ(differ, 0u) << "of " << want.size() << " values; largest difference " << worst;
}

struct Case {
  const char* preset;
  uint32_t type;
  int64_t height, width;
};

TEST(CudaVisionEncoder, MatchesTheCpuEncoderBitForBit) {
  SKIP_WITHOUT_CUDA();
  const Case cases[] = {
      {"tiny", kGgmlF32, 64, 64},      // the position table's own 4 x 4 grid
      {"tiny", kGgmlF16, 96, 64},      // resampled, oblong
      {"tiny", kGgmlBf16, 32, 128},    // one merged row
      {"small", kGgmlF16, 64, 96},     // a feed-forward width that is not a multiple of 32
      {"small", kGgmlBf16, 32, 32},    // a single merged token
      {"small", kGgmlQ8_0, 224, 224},  // the table's own 14 x 14 grid, 196 patches
  };
  ::walsh::testing::TempDir dir;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.preset) + " " + GgmlTypeName(c.type) + " " +
                 std::to_string(c.width) + "x" + std::to_string(c.height));
    const std::string path = dir.File("p.gguf");
    ASSERT_TRUE(WriteSyntheticMmproj({.preset = c.preset,
                                      .text_embedding_length = kTextWidth,
                                      .weight_type = c.type,
                                      .seed = 5},
                                     path)
                    .ok());
    auto cpu = VisionModel::Load(path, kTextWidth);
    auto gpu = VisionModel::Load(path, kTextWidth, {.cuda = true});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_EQ((*gpu)->encoder().device(), "cuda:0");
    const PixelValues px = PixelPattern(c.height, c.width);
    const auto want = (*cpu)->encoder().Encode(px);
    const auto got = (*gpu)->encoder().Encode(px);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(static_cast<int64_t>(want->size()), (c.height / 32) * (c.width / 32) * kTextWidth);
    ExpectSameBits(*want, *got);
    EXPECT_TRUE((*gpu)->Canary(nullptr).ok());
  }
}

// Attention's queries a few at a time (one launch per 5 queries, the last one short) and one at a
// time: the same rows as in one launch.
TEST(CudaVisionEncoder, AttentionInManyLaunchesChangesNoBit) {
  SKIP_WITHOUT_CUDA();
  ::walsh::testing::TempDir dir;
  ASSERT_TRUE(WriteSyntheticMmproj({.preset = "small", .text_embedding_length = kTextWidth},
                                   dir.File("p.gguf"))
                  .ok());
  auto file = GgufFile::Open(dir.File("p.gguf"));
  ASSERT_TRUE(file.ok());
  auto config = ParseMmprojConfig(**file);
  ASSERT_TRUE(config.ok());
  auto weights = VisionWeights::Load(**file, *config);
  ASSERT_TRUE(weights.ok());
  const PixelValues px = PixelPattern(96, 64);  // 24 patches
  const int64_t n = 24, heads = config->head_count;
  auto whole = CudaVisionEncoder::Create(*weights, {});
  ASSERT_TRUE(whole.ok()) << whole.status();
  const auto want = (*whole)->Encode(px);
  ASSERT_TRUE(want.ok()) << want.status();
  for (int64_t queries : {int64_t{5}, int64_t{1}}) {
    auto split = CudaVisionEncoder::Create(*weights, {.max_scores = queries * heads * n});
    ASSERT_TRUE(split.ok()) << split.status();
    const auto got = (*split)->Encode(px);
    ASSERT_TRUE(got.ok()) << got.status();
    SCOPED_TRACE(std::to_string(queries) + " queries a launch");
    ExpectSameBits(*want, *got);
  }
  EXPECT_THAT((*whole)->Encode(PixelPattern(48, 64)).status().message(),
              HasSubstr("not positive multiples of 32"));
}

// Encodes from several threads at once (each on a stream of its own, sharing the weights): every
// one the rows of an encode alone.
TEST(CudaVisionEncoder, ConcurrentEncodesGiveTheRowsOfOneAlone) {
  SKIP_WITHOUT_CUDA();
  ::walsh::testing::TempDir dir;
  ASSERT_TRUE(WriteSyntheticMmproj({.preset = "small", .text_embedding_length = kTextWidth},
                                   dir.File("p.gguf"))
                  .ok());
  auto model = VisionModel::Load(dir.File("p.gguf"), kTextWidth, {.cuda = true});
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<PixelValues> images = {PixelPattern(64, 64), PixelPattern(96, 160),
                                           PixelPattern(224, 224)};
  std::vector<std::vector<float>> alone;
  for (const PixelValues& px : images) {
    auto rows = (*model)->encoder().Encode(px);
    ASSERT_TRUE(rows.ok()) << rows.status();
    alone.push_back(*rows);
  }
  constexpr int kThreads = 6;
  std::vector<absl::StatusOr<std::vector<float>>> got(kThreads);
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] { got[t] = (*model)->encoder().Encode(images[t % 3]); });
    }
    for (std::thread& t : threads) t.join();
  }
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(got[t].ok()) << got[t].status();
    SCOPED_TRACE("thread " + std::to_string(t));
    ExpectSameBits(alone[t % 3], *got[t]);
  }
}

}  // namespace
}  // namespace walsh
