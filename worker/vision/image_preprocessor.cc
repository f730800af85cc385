#include "worker/vision/image_preprocessor.h"

#include "common/status_macros.h"
#include "worker/vision/bicubic_resize.h"

namespace walsh {

PixelValues NormalizeImage(const RgbImage& image, const std::array<float, 3>& mean,
                           const std::array<float, 3>& std) {
  PixelValues out{.height = image.height, .width = image.width};
  const int64_t plane = image.width * image.height;
  out.planes.resize(plane * 3);
  constexpr double kRescale = 1.0 / 255;  // applied in double, then stored as float
  for (int64_t i = 0; i < plane; ++i) {
    for (int c = 0; c < 3; ++c) {
      const float unit = static_cast<float>(image.rgb[i * 3 + c] * kRescale);
      out.planes[c * plane + i] = (unit - mean[c]) / std[c];
    }
  }
  return out;
}

absl::StatusOr<PixelValues> PreprocessImage(absl::Span<const uint8_t> bytes,
                                            const ImagePreprocessOptions& options) {
  ASSIGN_OR_RETURN(RgbImage image, DecodeImage(bytes, options.decode));
  ASSIGN_OR_RETURN(ResizedSize size,
                   SmartResize(image.height, image.width, options.patch_size * options.merge_size,
                               options.tokens));
  return NormalizeImage(ResizeBicubic(image, size.width, size.height), options.mean, options.std);
}

}  // namespace walsh
