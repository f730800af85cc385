// WebP through libwebp: still images, lossy or lossless, with or without alpha.
#include <webp/decode.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/vision/alpha_composite.h"
#include "worker/vision/image_codecs.h"

namespace walsh {

absl::StatusOr<RgbImage> DecodeWebp(absl::Span<const uint8_t> bytes, int64_t max_pixels) {
  WebPBitstreamFeatures features;
  const VP8StatusCode header = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (header != VP8_STATUS_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("the WebP is corrupt: its header does not parse (libwebp status ",
                     static_cast<int>(header), ")"));
  }
  if (features.has_animation) {
    return absl::InvalidArgumentError("the WebP is animated; walsh takes still images only");
  }
  if (absl::Status size = CheckImageSize("WebP", features.width, features.height, max_pixels);
      !size.ok()) {
    return size;
  }
  RgbImage image{.width = features.width, .height = features.height};
  const size_t pixels = size_t(features.width) * features.height;
  if (!features.has_alpha) {
    image.rgb.resize(pixels * 3);
    if (WebPDecodeRGBInto(bytes.data(), bytes.size(), image.rgb.data(), image.rgb.size(),
                          features.width * 3) == nullptr) {
      return absl::InvalidArgumentError("the WebP is corrupt: its image data does not decode");
    }
    return image;
  }
  std::vector<uint8_t> rgba(pixels * 4);
  if (WebPDecodeRGBAInto(bytes.data(), bytes.size(), rgba.data(), rgba.size(),
                         features.width * 4) == nullptr) {
    return absl::InvalidArgumentError("the WebP is corrupt: its image data does not decode");
  }
  image.rgb.resize(pixels * 3);
  for (size_t i = 0, o = 0; i < rgba.size(); i += 4, o += 3) {
    for (int c = 0; c < 3; ++c) image.rgb[o + c] = CompositeOnWhite(rgba[i + c], rgba[i + 3]);
  }
  return image;
}

}  // namespace walsh
