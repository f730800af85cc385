#include "worker/vision/smart_resize.h"

#include <algorithm>
#include <cfenv>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

constexpr double kMaxAspectRatio = 200;

// Python's round(): to nearest, halves to even (the default floating-point rounding mode).
int64_t RoundHalfEven(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

}  // namespace

absl::StatusOr<ResizedSize> SmartResize(int64_t height, int64_t width, int64_t factor,
                                        const ImageTokenLimits& limits) {
  if (height <= 0 || width <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the image is empty (", width, "x", height, ")"));
  }
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  if (std::max(h, w) / std::min(h, w) > kMaxAspectRatio) {
    return absl::InvalidArgumentError(absl::StrCat("the image is ", width, "x", height,
                                                   ", an aspect ratio above ", kMaxAspectRatio));
  }
  const double f = static_cast<double>(factor);
  const double min_pixels = static_cast<double>(limits.min_tokens) * f * f;
  const double max_pixels = static_cast<double>(limits.max_tokens) * f * f;
  // A side of less than half the factor rounds to 0 here, so the area is under any minimum and the
  // branch below sizes it.
  ResizedSize size{RoundHalfEven(h / f) * factor, RoundHalfEven(w / f) * factor};
  const double area = static_cast<double>(size.height) * static_cast<double>(size.width);
  if (area > max_pixels) {
    const double beta = std::sqrt(h * w / max_pixels);
    size.height = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    size.width = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (area < min_pixels) {
    const double beta = std::sqrt(min_pixels / (h * w));
    size.height = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    size.width = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return size;
}

}  // namespace walsh
