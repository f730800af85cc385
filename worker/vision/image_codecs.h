// The three decoders DecodeImage dispatches to, one per file (png_decoder.cc, jpeg_decoder.cc,
// webp_decoder.cc). Each checks the header's size against `max_pixels` before it allocates.
#ifndef WALSH_WORKER_VISION_IMAGE_CODECS_H_
#define WALSH_WORKER_VISION_IMAGE_CODECS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/vision/rgb_image.h"

namespace walsh {

absl::StatusOr<RgbImage> DecodePng(absl::Span<const uint8_t> bytes, int64_t max_pixels);
absl::StatusOr<RgbImage> DecodeJpeg(absl::Span<const uint8_t> bytes, int64_t max_pixels);
absl::StatusOr<RgbImage> DecodeWebp(absl::Span<const uint8_t> bytes, int64_t max_pixels);

// The refusal of a header whose size is zero or over `max_pixels`; OK otherwise.
absl::Status CheckImageSize(const char* format, int64_t width, int64_t height, int64_t max_pixels);

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_IMAGE_CODECS_H_
