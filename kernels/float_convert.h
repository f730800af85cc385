// Exact scalar conversions between fp32 and the 16-bit float formats (IEEE fp16, bf16), for
// the host and CUDA devices alike.
#ifndef WALSH_KERNELS_FLOAT_CONVERT_H_
#define WALSH_KERNELS_FLOAT_CONVERT_H_

#include <stdint.h>
#include <string.h>

#include "kernels/host_device.h"

namespace walsh {

WALSH_HD uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);  // memcpy is defined for host and device code alike
  return u;
}

WALSH_HD float BitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE binary16 -> fp32, exact for every input including subnormals, inf and NaN.
WALSH_HD float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Subnormal or zero: mant * 2^-24, exact in fp32.
    const float v = static_cast<float>(mant) * BitsFloat(0x33800000u);
    return BitsFloat(FloatBits(v) | sign);
  }
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

// fp32 -> IEEE binary16 with round-to-nearest-even; overflow gives inf, NaN stays NaN.
WALSH_HD uint16_t FloatToFp16(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in fp16: round abs * 2^24 to an integer, ties to even.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // m * 2^(e-150) * 2^24 = m >> (126 - e)
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) ++r;
  return sign | static_cast<uint16_t>(r);
}

WALSH_HD float Bf16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

// fp32 -> bf16 with round-to-nearest-even; NaN stays NaN.
WALSH_HD uint16_t FloatToBf16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

}  // namespace walsh

#endif  // WALSH_KERNELS_FLOAT_CONVERT_H_
