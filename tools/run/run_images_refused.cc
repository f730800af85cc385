// The engine-only build (the GPU check's image) has no image decoders.
#include "tools/run/run_images.h"

namespace walsh {

absl::StatusOr<std::vector<int32_t>> ImagePromptIds(const RunOptions&, const Tokenizer&, int64_t,
                                                    PromptImages*) {
  return absl::UnimplementedError(
      "--image: this walsh-run is the engine-only build, which has no image decoders");
}

}  // namespace walsh
