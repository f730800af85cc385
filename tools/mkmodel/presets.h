// Shapes of the synthetic models walsh-mkmodel writes.
#ifndef WALSH_TOOLS_MKMODEL_PRESETS_H_
#define WALSH_TOOLS_MKMODEL_PRESETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/qwen35_config.h"

namespace walsh {

struct ModelPreset {
  std::string name;
  Qwen35Config config;         // vocab_size included
  int64_t block_size = 0;      // prism.hadamard.block_size
  int64_t regular_tokens = 0;  // byte tokens + merges; the special tokens follow
};

// "tiny", "small" or "27b".
absl::StatusOr<ModelPreset> FindPreset(const std::string& name);
std::vector<std::string> PresetNames();

}  // namespace walsh

#endif  // WALSH_TOOLS_MKMODEL_PRESETS_H_
