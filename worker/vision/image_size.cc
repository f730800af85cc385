#include "worker/vision/image_size.h"

#include <webp/decode.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/vision/image_decoder.h"

namespace walsh {
namespace {

uint32_t BigEndian(const uint8_t* p, int n) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i) v = v << 8 | p[i];
  return v;
}

absl::StatusOr<ImageSize> PngSize(absl::Span<const uint8_t> b) {
  // The signature, then IHDR: its length (13), its type, width and height.
  if (b.size() < 24 || BigEndian(b.data() + 8, 4) != 13 || std::memcmp(b.data() + 12, "IHDR", 4)) {
    return absl::InvalidArgumentError("the PNG is corrupt: it does not start with its IHDR");
  }
  return ImageSize{BigEndian(b.data() + 16, 4), BigEndian(b.data() + 20, 4)};
}

absl::StatusOr<ImageSize> JpegSize(absl::Span<const uint8_t> b) {
  // Marker segments from after SOI, up to the first frame header; the scan comes after it.
  size_t at = 2;
  while (at + 4 <= b.size()) {
    if (b[at] != 0xff) break;
    const uint8_t marker = b[at + 1];
    if (marker == 0xff) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {  // no length
      at += 2;
      continue;
    }
    const size_t length = BigEndian(b.data() + at + 2, 2);
    const bool frame =
        marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
    if (frame) {
      if (length < 7 || at + 2 + 7 > b.size()) break;
      return ImageSize{BigEndian(b.data() + at + 7, 2), BigEndian(b.data() + at + 5, 2)};
    }
    if (marker == 0xda || marker == 0xd9 || length < 2) break;  // a scan or the end first
    at += 2 + length;
  }
  return absl::InvalidArgumentError("the JPEG is corrupt: no frame header before its data");
}

absl::StatusOr<ImageSize> WebpSize(absl::Span<const uint8_t> b) {
  WebPBitstreamFeatures features;
  if (WebPGetFeatures(b.data(), b.size(), &features) != VP8_STATUS_OK) {
    return absl::InvalidArgumentError("the WebP is corrupt: its header does not parse");
  }
  return ImageSize{features.width, features.height};
}

}  // namespace

absl::StatusOr<ImageSize> ReadImageSize(absl::Span<const uint8_t> bytes) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kPng:
      return PngSize(bytes);
    case ImageFormat::kJpeg:
      return JpegSize(bytes);
    case ImageFormat::kWebp:
      return WebpSize(bytes);
    case ImageFormat::kUnknown:
      break;
  }
  return absl::InvalidArgumentError(
      "the image is not PNG, JPEG or WebP (its first bytes are none of their signatures)");
}

}  // namespace walsh
