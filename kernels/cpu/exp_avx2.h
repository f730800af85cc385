// ExpF (kernels/numerics.h) eight lanes at a time, bit for bit: its range reduction, Horner
// polynomial and two-step scaling are the same float operations in the same order; its three
// early returns (NaN, overflow, underflow) become blends, and the "k2 != 0" branch multiplies by
// 2^0 = 1, which is exact. Included only by files compiled for AVX2; internal linkage, so no
// other file links this ISA's copy.
#ifndef WALSH_KERNELS_CPU_EXP_AVX2_H_
#define WALSH_KERNELS_CPU_EXP_AVX2_H_

#include <immintrin.h>

#include <initializer_list>

namespace walsh {
namespace {

inline __m256 Pow2(__m256i k) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

inline __m256 Exp8(__m256 x) {
  const __m256 kf = _mm256_mul_ps(x, _mm256_set1_ps(1.44269502162933349609375f));
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 rounded = _mm256_blendv_ps(_mm256_add_ps(kf, half), _mm256_sub_ps(kf, half),
                                          _mm256_cmp_ps(kf, _mm256_setzero_ps(), _CMP_LT_OQ));
  const __m256i k = _mm256_cvttps_epi32(rounded);
  const __m256 fk = _mm256_cvtepi32_ps(k);
  const __m256 r =
      _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(fk, _mm256_set1_ps(0.693145751953125f))),
                    _mm256_mul_ps(fk, _mm256_set1_ps(1.4286068203094172e-06f)));
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  for (const float c :
       {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) {
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
  }
  // k1 = k > 127 ? 127 : (k < -100 ? k + 100 : k); k2 = k - k1.
  const __m256i k_hi = _mm256_cmpgt_epi32(k, _mm256_set1_epi32(127));
  const __m256i k_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(-100), k);
  __m256i k1 = _mm256_blendv_epi8(k, _mm256_add_epi32(k, _mm256_set1_epi32(100)), k_lo);
  k1 = _mm256_blendv_epi8(k1, _mm256_set1_epi32(127), k_hi);
  const __m256i k2 = _mm256_sub_epi32(k, k1);
  p = _mm256_mul_ps(_mm256_mul_ps(p, Pow2(k1)), Pow2(k2));
  // The early returns, in the scalar code's order of precedence.
  p = _mm256_blendv_ps(p, _mm256_setzero_ps(),
                       _mm256_cmp_ps(x, _mm256_set1_ps(-103.97208404541016f), _CMP_LT_OQ));
  p = _mm256_blendv_ps(p, _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000)),
                       _mm256_cmp_ps(x, _mm256_set1_ps(88.72283935546875f), _CMP_GT_OQ));
  return _mm256_blendv_ps(p, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

}  // namespace
}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_EXP_AVX2_H_
