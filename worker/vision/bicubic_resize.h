// Resampling to the encoder's size (docs/vision.md §2.3): bicubic (a = -0.5) with the kernel
// widened by the scale when shrinking, separable, rows first, in the fixed point of the model's
// processor (Pillow's Image.resize with BICUBIC: coefficients of 22 fractional bits, each pass
// rounded and clamped to 8 bits), so its bytes are the processor's bytes.
#ifndef WALSH_WORKER_VISION_BICUBIC_RESIZE_H_
#define WALSH_WORKER_VISION_BICUBIC_RESIZE_H_

#include <cstdint>

#include "worker/vision/rgb_image.h"

namespace walsh {

// `width` and `height` are at least 1. The same size returns a copy.
RgbImage ResizeBicubic(const RgbImage& image, int64_t width, int64_t height);

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_BICUBIC_RESIZE_H_
