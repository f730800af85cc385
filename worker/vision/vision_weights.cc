#include "worker/vision/vision_weights.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/float_convert.h"
#include "worker/model/ggml_types.h"

namespace walsh {
namespace {

constexpr int kQ8Block = 32;  // ggml's Q8_0: an fp16 scale, then 32 int8

absl::StatusOr<std::vector<float>> ToFloat(const GgufFile& file, const std::string& name) {
  const GgufTensorInfo* t = file.FindTensor(name);
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' missing"));
  std::vector<float> out(t->n_elements);
  const uint8_t* p = t->data;
  switch (t->type) {
    case kGgmlF32:
      std::memcpy(out.data(), p, out.size() * sizeof(float));
      return out;
    case kGgmlF16:
    case kGgmlBf16:
      for (uint64_t i = 0; i < t->n_elements; ++i) {
        uint16_t bits;
        std::memcpy(&bits, p + 2 * i, 2);
        out[i] = t->type == kGgmlF16 ? Fp16ToFloat(bits) : Bf16ToFloat(bits);
      }
      return out;
    case kGgmlQ8_0:
      for (uint64_t b = 0; b < t->n_elements / kQ8Block; ++b) {
        const uint8_t* block = p + b * (2 + kQ8Block);
        uint16_t scale_bits;
        std::memcpy(&scale_bits, block, 2);
        const float scale = Fp16ToFloat(scale_bits);
        for (int j = 0; j < kQ8Block; ++j) {
          out[b * kQ8Block + j] = scale * static_cast<float>(static_cast<int8_t>(block[2 + j]));
        }
      }
      return out;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", name, "' has ggml type ", t->type, ", not F32, F16, BF16 or Q8_0"));
}

}  // namespace

absl::StatusOr<VisionWeights> VisionWeights::Load(const GgufFile& file,
                                                  const MmprojConfig& config) {
  VisionWeights w{.config = config};
  ASSIGN_OR_RETURN(w.patch_w, ToFloat(file, "v.patch_embd.weight"));
  ASSIGN_OR_RETURN(std::vector<float> second_slice, ToFloat(file, "v.patch_embd.weight.1"));
  for (size_t i = 0; i < w.patch_w.size(); ++i) w.patch_w[i] += second_slice[i];
  ASSIGN_OR_RETURN(w.patch_b, ToFloat(file, "v.patch_embd.bias"));
  ASSIGN_OR_RETURN(w.position, ToFloat(file, "v.position_embd.weight"));
  for (int64_t i = 0; i < config.block_count; ++i) {
    const std::string b = absl::StrCat("v.blk.", i, ".");
    VisionBlockWeights& k = w.blocks.emplace_back();
    for (const auto& [field, suffix] : VisionBlockWeights::kNamed) {
      ASSIGN_OR_RETURN(k.*field, ToFloat(file, b + suffix));
    }
  }
  ASSIGN_OR_RETURN(w.post_ln_w, ToFloat(file, "v.post_ln.weight"));
  ASSIGN_OR_RETURN(w.post_ln_b, ToFloat(file, "v.post_ln.bias"));
  ASSIGN_OR_RETURN(w.mm0_w, ToFloat(file, "mm.0.weight"));
  ASSIGN_OR_RETURN(w.mm0_b, ToFloat(file, "mm.0.bias"));
  ASSIGN_OR_RETURN(w.mm2_w, ToFloat(file, "mm.2.weight"));
  ASSIGN_OR_RETURN(w.mm2_b, ToFloat(file, "mm.2.bias"));
  return w;
}

}  // namespace walsh
