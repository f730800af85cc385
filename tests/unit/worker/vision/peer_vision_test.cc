// walsh's vision encoder against another engine's: llama.cpp's mtmd (clip) encoder ran
// walsh-mkmodel's f32 projectors on the pixels in tests/data/peer-vision (its README says how).
// Both read the same normalized pixels, so this compares the encoders: patch embedding, learned
// positions (at the projector's own grid, and interpolated to another), M-RoPE, attention, the
// blocks and the merger. The bounds are docs/vision.md §6's. The engines differ by design in the
// merger's GELU (llama.cpp's tanh form against the model's exact one, and ggml's float16 GELU
// table), and, where the grid is not the projector's own, in resampling the position table
// (llama.cpp's half-pixel centres with antialiasing against the model's aligned corners).
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_mmproj.h"
#include "worker/vision/vision_model.h"

namespace walsh {
namespace {

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = testing::ReadFileOrDie(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// preset -> the digest of the projector the peer read.
std::map<std::string, std::string> PeerProjectors() {
  std::istringstream lines(
      testing::ReadFileOrDie(testing::TestDataPath("peer-vision/mmproj.sha256")));
  std::map<std::string, std::string> out;
  std::string digest, preset;
  while (lines >> digest >> preset) out[preset] = digest;
  return out;
}

// Of the largest output. Measured (2026-12-04): 3.7e-4 and 4.4e-4 at the projector's own grid,
// 1.6e-3 and 7.0e-3 resampled; the RoPE's row and column swapped gives 0.10 to 0.14 in every case.
constexpr double kOwnGridBound = 1e-3;
constexpr double kResampledBound = 2e-2;

struct PeerCase {
  const char* preset;
  int64_t text_width;  // the preset's text model: the merger's output width
  int64_t height, width;
  bool own_grid;  // the projector's image_size: its position table is used as it is
};

TEST(PeerVision, TheEncoderAgreesWithLlamaCppsClip) {
  const std::map<std::string, std::string> digests = PeerProjectors();
  testing::TempDir dir;
  for (const PeerCase& c :
       {PeerCase{"tiny", 256, 64, 64, true}, PeerCase{"tiny", 256, 64, 96, false},
        PeerCase{"small", 1024, 224, 224, true}, PeerCase{"small", 1024, 96, 160, false}}) {
    const std::string name = absl::StrCat(c.preset, "_", c.height, "x", c.width);
    SCOPED_TRACE(name);
    const std::string path = dir.File(absl::StrCat(c.preset, ".mmproj"));
    ASSERT_TRUE(WriteSyntheticMmproj({.preset = c.preset,
                                      .text_embedding_length = c.text_width,
                                      .weight_type = kGgmlF32,
                                      .seed = 1},
                                     path)
                    .ok());
    const std::string bytes = testing::ReadFileOrDie(path);
    ASSERT_EQ(Sha256Hex(bytes.data(), bytes.size()), digests.at(c.preset))
        << "not the projector the peer read (walsh-mkmodel's output changed)";
    auto model = VisionModel::Load(path, c.text_width);  // as walsh-worker --mmproj loads it
    ASSERT_TRUE(model.ok()) << model.status();
    const ImageEncoder& encoder = (*model)->encoder();

    PixelValues px{c.height, c.width,
                   ReadFloats(testing::TestDataPath("peer-vision/" + name + ".pixels.f32"))};
    ASSERT_EQ(px.planes.size(), static_cast<size_t>(3 * c.height * c.width));
    const std::vector<float> peer =
        ReadFloats(testing::TestDataPath("peer-vision/" + name + ".llamacpp.f32"));
    const auto rows = encoder.Encode(px);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->size(), peer.size());
    ASSERT_EQ(static_cast<int64_t>(peer.size()), (c.height / 32) * (c.width / 32) * c.text_width);
    double sum_sq = 0, worst = 0, largest = 0;
    for (size_t i = 0; i < peer.size(); ++i) {
      sum_sq += double{peer[i]} * peer[i];
      largest = std::max(largest, std::fabs(double{peer[i]}));
      worst = std::max(worst, std::fabs(double{(*rows)[i]} - peer[i]));
    }
    const double rms = std::sqrt(sum_sq / peer.size());
    EXPECT_GT(rms, 0.0);
    std::printf("%s: rms %.4g, largest %.4g, worst difference %.3g (%.2e of the largest)\n",
                name.c_str(), rms, largest, worst, worst / largest);
    EXPECT_LE(worst, (c.own_grid ? kOwnGridBound : kResampledBound) * largest);
  }
}

}  // namespace
}  // namespace walsh
