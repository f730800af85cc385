// Synthetic mmproj files: the clip.* keys of a preset and seeded tensor values.
#include "tools/mkmodel/synthetic_mmproj.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/float_convert.h"
#include "tools/mkmodel/rng.h"

namespace walsh {
namespace {

// A value in a tensor's typical range: LayerNorm gains near 1, biases and positions small,
// matrices scaled by their fan-in.
double Draw(Rng& rng, const GgufTensorSpec& spec) {
  const double z = rng.Normal();
  if (absl::StrContains(spec.name, "ln") && absl::EndsWith(spec.name, ".weight")) {
    return 1.0 + 0.1 * z;
  }
  if (absl::EndsWith(spec.name, ".bias") || spec.name == "v.position_embd.weight") return 0.02 * z;
  const double fan_in = spec.name.rfind("v.patch_embd.weight", 0) == 0
                            ? static_cast<double>(spec.ne[0] * spec.ne[1] * spec.ne[2])
                            : static_cast<double>(spec.ne[0]);
  return z / std::sqrt(fan_in);
}

constexpr uint64_t kQ8Block = 32;

// ggml's Q8_0: per block of 32, the scale max|x| / 127 as fp16, then round(x / scale) as int8.
absl::Status WriteQ8_0(Rng& rng, const GgufTensorSpec& spec, uint64_t n, GgufByteSink& sink) {
  std::vector<uint8_t> blocks;
  blocks.reserve(n / kQ8Block * (2 + kQ8Block));
  for (uint64_t b = 0; b < n / kQ8Block; ++b) {
    float x[kQ8Block], amax = 0;
    for (float& v : x) {
      v = static_cast<float>(Draw(rng, spec));
      amax = std::max(amax, std::fabs(v));
    }
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t d16 = FloatToFp16(d);
    blocks.push_back(static_cast<uint8_t>(d16 & 0xff));
    blocks.push_back(static_cast<uint8_t>(d16 >> 8));
    for (float v : x)
      blocks.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::round(v * id))));
  }
  return sink.Write(blocks.data(), blocks.size());
}

}  // namespace

absl::StatusOr<MmprojConfig> MmprojPresetConfig(const std::string& preset,
                                                int64_t text_embedding_length) {
  MmprojConfig c;
  c.patch_size = 16;
  c.layer_norm_epsilon = 1e-6f;
  c.projection_dim = text_embedding_length;
  c.image_mean = {0.5f, 0.5f, 0.5f};
  c.image_std = {0.5f, 0.5f, 0.5f};
  if (preset == "tiny") {
    c.image_size = 64, c.embedding_length = 64, c.feed_forward_length = 96, c.block_count = 2;
    c.head_count = 4;
  } else if (preset == "small") {
    // A feed-forward width that is not a multiple of 32, as the released one is not.
    c.image_size = 224, c.embedding_length = 128, c.feed_forward_length = 344;
    c.block_count = 4, c.head_count = 4;
  } else if (preset == "27b") {
    c.image_size = 768, c.embedding_length = 1152, c.feed_forward_length = 4304;
    c.block_count = 27, c.head_count = 16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("no vision projector preset \"", preset, "\" (tiny, small or 27b)"));
  }
  if (text_embedding_length < 1) {
    return absl::InvalidArgumentError("the text model's hidden size must be positive");
  }
  return c;
}

absl::StatusOr<GgufWriter> SyntheticMmprojWriter(const SyntheticMmprojOptions& o) {
  if (o.weight_type != kGgmlF32 && o.weight_type != kGgmlF16 && o.weight_type != kGgmlBf16 &&
      o.weight_type != kGgmlQ8_0) {
    return absl::InvalidArgumentError("synthetic projector weights are F32, F16, BF16 or Q8_0");
  }
  ASSIGN_OR_RETURN(MmprojConfig config, MmprojPresetConfig(o.preset, o.text_embedding_length));
  GgufWriter w;
  WriteMmprojConfig(config, w);
  w.SetKv("general.type", GgufValue::String("mmproj"));
  w.SetKv("general.name", GgufValue::String(absl::StrCat("walsh synthetic projector ", o.preset)));
  for (const ExpectedVisionTensor& e : MmprojInventory(config)) {
    uint32_t type = e.cls == VisionTensorClass::kF32 ? kGgmlF32 : o.weight_type;
    // As the released Q8_0 file: a matrix whose rows are not whole blocks of 32 stays F16.
    if (type == kGgmlQ8_0 && e.ne[0] % kQ8Block != 0) type = kGgmlF16;
    RETURN_IF_ERROR(w.AddTensor(e.name, e.ne, type));
  }
  return w;
}

GgufWriter::TensorFiller SyntheticMmprojFiller(uint64_t seed) {
  return [seed](size_t, const GgufTensorSpec& spec, GgufByteSink& sink) -> absl::Status {
    uint64_t n = 1;
    for (uint64_t d : spec.ne) n *= d;
    Rng rng(seed ^ HashName(spec.name));
    if (spec.type == kGgmlF32) {
      std::vector<float> v(n);
      for (float& x : v) x = static_cast<float>(Draw(rng, spec));
      return sink.Write(v.data(), v.size() * sizeof(float));
    }
    if (spec.type == kGgmlQ8_0) return WriteQ8_0(rng, spec, n, sink);
    std::vector<uint16_t> v(n);
    for (uint16_t& x : v) {
      const float f = static_cast<float>(Draw(rng, spec));
      x = spec.type == kGgmlF16 ? FloatToFp16(f) : FloatToBf16(f);
    }
    return sink.Write(v.data(), v.size() * sizeof(uint16_t));
  };
}

absl::Status WriteSyntheticMmproj(const SyntheticMmprojOptions& options, const std::string& path) {
  ASSIGN_OR_RETURN(GgufWriter writer, SyntheticMmprojWriter(options));
  return writer.WriteFile(path, SyntheticMmprojFiller(options.seed));
}

}  // namespace walsh
