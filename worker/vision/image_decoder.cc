#include "worker/vision/image_decoder.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/vision/image_codecs.h"

namespace walsh {

ImageFormat SniffImageFormat(absl::Span<const uint8_t> bytes) {
  const auto starts = [&](size_t at, const char* magic, size_t n) {
    return bytes.size() >= at + n && std::memcmp(bytes.data() + at, magic, n) == 0;
  };
  if (starts(0, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  if (starts(0, "\xff\xd8\xff", 3)) return ImageFormat::kJpeg;
  if (starts(0, "RIFF", 4) && starts(8, "WEBP", 4)) return ImageFormat::kWebp;
  return ImageFormat::kUnknown;
}

std::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

absl::Status CheckImageSize(const char* format, int64_t width, int64_t height, int64_t max_pixels) {
  if (width <= 0 || height <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", format, " image is empty (", width, "x", height, ")"));
  }
  if (width > max_pixels / height) {
    return absl::InvalidArgumentError(absl::StrCat("the ", format, " image is ", width, "x", height,
                                                   ", over the limit of ", max_pixels, " pixels"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RgbImage> DecodeImage(absl::Span<const uint8_t> bytes,
                                     const ImageDecodeLimits& limits) {
  if (static_cast<int64_t>(bytes.size()) > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the image is ", bytes.size(),
                                                   " bytes, over the limit of ", limits.max_bytes));
  }
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kPng:
      return DecodePng(bytes, limits.max_pixels);
    case ImageFormat::kJpeg:
      return DecodeJpeg(bytes, limits.max_pixels);
    case ImageFormat::kWebp:
      return DecodeWebp(bytes, limits.max_pixels);
    case ImageFormat::kUnknown:
      break;
  }
  return absl::InvalidArgumentError(
      "the image is not PNG, JPEG or WebP (its first bytes are none of their signatures)");
}

}  // namespace walsh
