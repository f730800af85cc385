// A decoded image: 8-bit RGB, interleaved, rows top to bottom (docs/vision.md §2).
#ifndef WALSH_WORKER_VISION_RGB_IMAGE_H_
#define WALSH_WORKER_VISION_RGB_IMAGE_H_

#include <cstdint>
#include <vector>

namespace walsh {

struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3

  uint8_t* Row(int64_t y) { return rgb.data() + y * width * 3; }
  const uint8_t* Row(int64_t y) const { return rgb.data() + y * width * 3; }
};

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_RGB_IMAGE_H_
