// The size an image is resized to before it is encoded (docs/vision.md §2.2): each side a multiple
// of `factor` (patch size times the merge, 32), the aspect ratio kept as nearly as that allows, and
// the area within the token limits. The model's processor's rule (transformers' Qwen2-VL
// smart_resize), with its rounding: halves to even, in double. `limits.min_tokens` is at least 1.
#ifndef WALSH_WORKER_VISION_SMART_RESIZE_H_
#define WALSH_WORKER_VISION_SMART_RESIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace walsh {

// In merged tokens, each factor x factor pixels: the processor's min and max pixels over factor².
struct ImageTokenLimits {
  int64_t min_tokens = 8;
  int64_t max_tokens = 4096;
};

struct ResizedSize {
  int64_t height = 0;
  int64_t width = 0;
};

// INVALID_ARGUMENT for an empty image or an aspect ratio above 200.
absl::StatusOr<ResizedSize> SmartResize(int64_t height, int64_t width, int64_t factor,
                                        const ImageTokenLimits& limits);

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_SMART_RESIZE_H_
