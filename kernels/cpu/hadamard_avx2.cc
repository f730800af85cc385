// AVX2 butterflies: stages h = 1, 2, 4 inside one 8-float register (swap, add, subtract,
// blend), stages h >= 8 between registers. Each output is a + b or a - b of the same operands
// as in the reference, so the result is bit-identical.
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/hadamard.h"

namespace walsh {
namespace {

template <int kMask>
inline __m256 InRegisterStage(__m256 v, __m256 swapped) {
  const __m256 sum = _mm256_add_ps(v, swapped);
  const __m256 diff = _mm256_sub_ps(swapped, v);  // upper partner: x_low - x_high
  return _mm256_blend_ps(sum, diff, kMask);
}

}  // namespace

void FwhtBlocksAvx2(float* v, int64_t n, int64_t block) {
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(block)));
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int64_t base = 0; base < n; base += block) {
    float* p = v + base;
    for (int64_t j = 0; j < block; j += 8) {
      __m256 x = _mm256_loadu_ps(p + j);
      x = InRegisterStage<0b10101010>(x, _mm256_permute_ps(x, 0b10110001));
      x = InRegisterStage<0b11001100>(x, _mm256_permute_ps(x, 0b01001110));
      x = InRegisterStage<0b11110000>(x, _mm256_permute2f128_ps(x, x, 1));
      _mm256_storeu_ps(p + j, x);
    }
    for (int64_t h = 8; h < block; h *= 2) {
      for (int64_t i = 0; i < block; i += 2 * h) {
        for (int64_t j = i; j < i + h; j += 8) {
          const __m256 a = _mm256_loadu_ps(p + j);
          const __m256 b = _mm256_loadu_ps(p + j + h);
          _mm256_storeu_ps(p + j, _mm256_add_ps(a, b));
          _mm256_storeu_ps(p + j + h, _mm256_sub_ps(a, b));
        }
      }
    }
    for (int64_t j = 0; j < block; j += 8) {
      _mm256_storeu_ps(p + j, _mm256_mul_ps(_mm256_loadu_ps(p + j), vscale));
    }
  }
}

}  // namespace walsh
