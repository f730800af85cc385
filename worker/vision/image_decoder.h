// Image bytes to RGB pixels: PNG, JPEG or WebP, told apart by their magic bytes (never by a
// declared MIME type), through Debian's libpng, libjpeg-turbo and libwebp (docs/vision.md §2.1).
// Every refusal is INVALID_ARGUMENT and says what was wrong; the size is checked against the limits
// from the header, before any pixel buffer is allocated.
#ifndef WALSH_WORKER_VISION_IMAGE_DECODER_H_
#define WALSH_WORKER_VISION_IMAGE_DECODER_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/vision/rgb_image.h"

namespace walsh {

struct ImageDecodeLimits {
  int64_t max_bytes = 20 << 20;
  int64_t max_pixels = 33'554'432;  // width * height of the encoded image: 8192 x 4096
};

enum class ImageFormat { kUnknown, kPng, kJpeg, kWebp };

ImageFormat SniffImageFormat(absl::Span<const uint8_t> bytes);
std::string_view ImageFormatName(ImageFormat format);

// Decodes to 8-bit RGB. Grey is replicated, a palette expanded, 16-bit samples keep their high
// byte, and transparency is composited onto white (CompositeOnWhite). Refused: another format,
// an animated WebP, a CMYK JPEG, a progressive JPEG of more than 500 scans, a truncated or corrupt
// file, and an image over the limits.
absl::StatusOr<RgbImage> DecodeImage(absl::Span<const uint8_t> bytes,
                                     const ImageDecodeLimits& limits);

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_IMAGE_DECODER_H_
