// Synthetic vision projectors (mmproj files, docs/vision.md §1) beside the synthetic text models:
// every key and tensor a qwen3vl_merger projector has, with seeded values.
#ifndef WALSH_TOOLS_MKMODEL_SYNTHETIC_MMPROJ_H_
#define WALSH_TOOLS_MKMODEL_SYNTHETIC_MMPROJ_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_writer.h"
#include "worker/model/mmproj_config.h"

namespace walsh {

struct SyntheticMmprojOptions {
  // tiny, small, or 27b: the released projector's shape (27 blocks of 1152, patch 16, 48x48
  // positions).
  std::string preset = "tiny";
  int64_t text_embedding_length = 0;  // the merger's output width
  uint32_t weight_type = kGgmlF16;    // of the matrices: F32, F16, BF16 or Q8_0
  uint64_t seed = 1;
};

absl::StatusOr<MmprojConfig> MmprojPresetConfig(const std::string& preset,
                                                int64_t text_embedding_length);

// Every key and tensor declared; fill the tensors with SyntheticMmprojFiller.
absl::StatusOr<GgufWriter> SyntheticMmprojWriter(const SyntheticMmprojOptions& options);
GgufWriter::TensorFiller SyntheticMmprojFiller(uint64_t seed);

absl::Status WriteSyntheticMmproj(const SyntheticMmprojOptions& options, const std::string& path);

}  // namespace walsh

#endif  // WALSH_TOOLS_MKMODEL_SYNTHETIC_MMPROJ_H_
