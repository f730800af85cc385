// The 32 sum lanes of kernels/token_ops.h (kSumLanes) as four AVX2 vectors: lane l is element
// l % 8 of vector l / 8, so a chunk of 32 consecutive terms adds into the four vectors as it
// is loaded. CombineLanes32 halves them exactly as CombineLanes does: p[l] + p[l + 16] (vector
// 0 + 2, 1 + 3), + p[l + 8] (0 + 1), + p[l + 4] (the halves), + p[l + 2], + p[l + 1]. Float
// addition is commutative bit for bit, so the operand order inside each pair does not matter.
// Included only by files compiled for AVX2; internal linkage, so no other file links this
// ISA's copy.
#ifndef WALSH_KERNELS_CPU_LANE_SUMS_AVX2_H_
#define WALSH_KERNELS_CPU_LANE_SUMS_AVX2_H_

#include <immintrin.h>

namespace walsh {
namespace {

inline float CombineLanes32(const __m256 lanes[4]) {
  const __m256 a =
      _mm256_add_ps(_mm256_add_ps(lanes[0], lanes[2]), _mm256_add_ps(lanes[1], lanes[3]));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

}  // namespace
}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_LANE_SUMS_AVX2_H_
