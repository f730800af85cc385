// The vision projector beside a model (an mmproj GGUF, projector qwen3vl_merger): its clip.* keys
// and the tensor inventory they imply (docs/vision.md §1). Anything walsh does not implement is
// refused by the key's or the tensor's name.
#ifndef WALSH_WORKER_MODEL_MMPROJ_CONFIG_H_
#define WALSH_WORKER_MODEL_MMPROJ_CONFIG_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/gguf_file.h"

namespace walsh {

inline constexpr char kQwen3VlMerger[] = "qwen3vl_merger";

struct MmprojConfig {
  int64_t image_size = 0;  // the position table covers (image_size / patch_size)^2 patches
  int64_t patch_size = 0;
  int64_t embedding_length = 0;  // the encoder's width
  int64_t feed_forward_length = 0;
  int64_t block_count = 0;
  int64_t head_count = 0;
  float layer_norm_epsilon = 0;
  int64_t projection_dim = 0;  // the merger's output: the text model's hidden size
  std::array<float, 3> image_mean = {};
  std::array<float, 3> image_std = {};
  int64_t spatial_merge_size = 2;

  // Meaningful for a config ParseMmprojConfig returned (or a preset's): the divisors are checked.
  int64_t head_dim() const { return embedding_length / head_count; }
  int64_t position_side() const { return image_size / patch_size; }
  // One merged token's input to the merger: a 2x2 window of patches side by side.
  int64_t merged_width() const {
    return embedding_length * spatial_merge_size * spatial_merge_size;
  }
};

// What a vision tensor may be stored as.
enum class VisionTensorClass {
  kWeight,  // F32, F16, BF16, or Q8_0 where the row length is a multiple of 32
  kF32,     // norms, biases, the position table
};

struct ExpectedVisionTensor {
  std::string name;
  std::vector<uint64_t> ne;
  VisionTensorClass cls;
};

// Parses and checks the clip.* keys: a vision encoder with the qwen3vl_merger projector, GELU,
// no windowed attention and no deepstack layers; an unknown clip.* key or any prism.hadamard.* key
// is refused by name.
absl::StatusOr<MmprojConfig> ParseMmprojConfig(const GgufFile& file);

// The tensors such a file holds, in the converter's order.
std::vector<ExpectedVisionTensor> MmprojInventory(const MmprojConfig& config);

// Every tensor present with its shape and an allowed type, and no tensor beyond the inventory.
absl::Status CheckMmprojInventory(const GgufFile& file, const MmprojConfig& config);

// The projector must feed this text model: its output width is the model's hidden size.
absl::Status CheckMmprojFitsText(const MmprojConfig& config, int64_t text_embedding_length);

class GgufWriter;
// Writes general.architecture "clip" and every clip.* key the config implies.
void WriteMmprojConfig(const MmprojConfig& config, GgufWriter& writer);

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_MMPROJ_CONFIG_H_
