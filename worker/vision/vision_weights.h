// A qwen3vl_merger projector's tensors as float32 (docs/vision.md §1, §3): converted once from
// F32, F16, BF16 or Q8_0 at load and shared by every request. The two temporal slices of the patch
// kernel are summed here, since an image is one frame seen by both.
#ifndef WALSH_WORKER_VISION_VISION_WEIGHTS_H_
#define WALSH_WORKER_VISION_VISION_WEIGHTS_H_

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/gguf_file.h"
#include "worker/model/mmproj_config.h"

namespace walsh {

// One ViT block's tensors, held as T (host floats here; device buffers in the CUDA encoder).
template <typename T>
struct VisionBlockTensors {
  T ln1_w, ln1_b, qkv_w, qkv_b, out_w, out_b;
  T ln2_w, ln2_b, up_w, up_b, down_w, down_b;

  // Each with its name's suffix in the file (v.blk.N.<suffix>).
  static constexpr std::pair<T VisionBlockTensors::*, const char*> kNamed[] = {
      {&VisionBlockTensors::ln1_w, "ln1.weight"},
      {&VisionBlockTensors::ln1_b, "ln1.bias"},
      {&VisionBlockTensors::qkv_w, "attn_qkv.weight"},
      {&VisionBlockTensors::qkv_b, "attn_qkv.bias"},
      {&VisionBlockTensors::out_w, "attn_out.weight"},
      {&VisionBlockTensors::out_b, "attn_out.bias"},
      {&VisionBlockTensors::ln2_w, "ln2.weight"},
      {&VisionBlockTensors::ln2_b, "ln2.bias"},
      {&VisionBlockTensors::up_w, "ffn_up.weight"},
      {&VisionBlockTensors::up_b, "ffn_up.bias"},
      {&VisionBlockTensors::down_w, "ffn_down.weight"},
      {&VisionBlockTensors::down_b, "ffn_down.bias"},
  };
};
using VisionBlockWeights = VisionBlockTensors<std::vector<float>>;

struct VisionWeights {
  MmprojConfig config;
  std::vector<float> patch_w;  // [embedding][3 * patch * patch], channel, row, column
  std::vector<float> patch_b;
  std::vector<float> position;  // [side * side][embedding], row-major grid
  std::vector<VisionBlockWeights> blocks;
  std::vector<float> post_ln_w, post_ln_b;
  std::vector<float> mm0_w, mm0_b, mm2_w, mm2_b;  // rows of the output, each of the input's width

  // From a file CheckMmprojInventory accepted for `config`.
  static absl::StatusOr<VisionWeights> Load(const GgufFile& file, const MmprojConfig& config);
};

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_VISION_WEIGHTS_H_
