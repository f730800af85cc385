// Image bytes to the encoder's input (docs/vision.md §2): decoded, resized to the smart-resize
// size with the processor's bicubic, and normalized per channel into planes.
#ifndef WALSH_WORKER_VISION_IMAGE_PREPROCESSOR_H_
#define WALSH_WORKER_VISION_IMAGE_PREPROCESSOR_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/vision/image_decoder.h"
#include "worker/vision/pixel_values.h"
#include "worker/vision/rgb_image.h"
#include "worker/vision/smart_resize.h"

namespace walsh {

struct ImagePreprocessOptions {
  ImageDecodeLimits decode;
  ImageTokenLimits tokens;
  int64_t patch_size = 16;  // from the projector's keys
  int64_t merge_size = 2;
  std::array<float, 3> mean = {0.5f, 0.5f, 0.5f};
  std::array<float, 3> std = {0.5f, 0.5f, 0.5f};
};

// `(u8 / 255 - mean) / std` as the processor computes it: the rescale in double, stored as float,
// the rest in float.
PixelValues NormalizeImage(const RgbImage& image, const std::array<float, 3>& mean,
                           const std::array<float, 3>& std);

// Decode, smart-resize, bicubic, normalize. Refusals are decoding's and SmartResize's.
absl::StatusOr<PixelValues> PreprocessImage(absl::Span<const uint8_t> bytes,
                                            const ImagePreprocessOptions& options);

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_IMAGE_PREPROCESSOR_H_
