// The encoder's input: an image resized to the grid and normalized, as three planes of floats
// (docs/vision.md §2).
#ifndef WALSH_WORKER_VISION_PIXEL_VALUES_H_
#define WALSH_WORKER_VISION_PIXEL_VALUES_H_

#include <cstdint>
#include <vector>

namespace walsh {

struct PixelValues {
  int64_t height = 0;  // a multiple of patch_size * merge_size
  int64_t width = 0;
  std::vector<float> planes;  // R, G, B planes of height * width, row-major

  // Rows the image becomes in the prompt: one per merged window (docs/vision.md §2).
  int64_t Tokens(int64_t patch_size, int64_t merge_size) const {
    const int64_t side = patch_size * merge_size;
    return (height / side) * (width / side);
  }
};

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_PIXEL_VALUES_H_
