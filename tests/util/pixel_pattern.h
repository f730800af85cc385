// A deterministic image for the vision encoder tests: every plane value sin(0.37 i) · 0.9, so
// neighbouring pixels, channels and patches all differ.
#ifndef WALSH_TESTS_UTIL_PIXEL_PATTERN_H_
#define WALSH_TESTS_UTIL_PIXEL_PATTERN_H_

#include <cmath>
#include <cstdint>

#include "worker/vision/pixel_values.h"

namespace walsh::testing {

inline PixelValues PixelPattern(int64_t height, int64_t width) {
  PixelValues px{.height = height, .width = width};
  px.planes.resize(3 * height * width);
  for (size_t i = 0; i < px.planes.size(); ++i) {
    px.planes[i] = static_cast<float>(std::sin(0.37 * double(i)) * 0.9);
  }
  return px;
}

}  // namespace walsh::testing

#endif  // WALSH_TESTS_UTIL_PIXEL_PATTERN_H_
