// Transparency onto a white background, as the model's image processor flattens RGBA before it
// resizes: Pillow's Image.alpha_composite over an opaque white image, in its own fixed point
// (7 fractional bits, a rounded division by 255), so the bytes are the processor's bytes.
#ifndef WALSH_WORKER_VISION_ALPHA_COMPOSITE_H_
#define WALSH_WORKER_VISION_ALPHA_COMPOSITE_H_

#include <cstdint>

namespace walsh {

inline uint8_t CompositeOnWhite(uint8_t value, uint8_t alpha) {
  // Pillow's coefficients for a fully opaque destination: alpha and 255 - alpha, times 2^7.
  const uint32_t blended = (uint32_t{value} * alpha + 255u * (255u - alpha)) * 128u + (0x80u << 7);
  return static_cast<uint8_t>(((((blended >> 8) + blended) >> 8)) >> 7);
}

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_ALPHA_COMPOSITE_H_
