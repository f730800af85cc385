// The softmax of attention scores with AVX2, bit for bit with the shared SoftmaxNumerators
// (kernels/token_ops.h) followed by the division of each numerator by their sum: ExpF eight
// lanes at a time (exp_avx2.h), the 32 sum lanes as four vectors. The running maximum keeps eight
// lanes and combines them at the end; a maximum is the same value in any order, bar the sign of
// a zero, and s - (+0) and s - (-0) differ only for s = ±0, whose ExpF is 1 either way. Included
// only by files compiled for AVX2; internal linkage, so no other file links this ISA's copy.
#ifndef WALSH_KERNELS_CPU_SOFTMAX_AVX2_H_
#define WALSH_KERNELS_CPU_SOFTMAX_AVX2_H_

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/exp_avx2.h"
#include "kernels/token_ops.h"

namespace walsh {
namespace {

// scores[0 .. n) -> e^(s_t - max) / Σ e^(s_u - max), the weights of the values.
inline void SoftmaxWeightsAvx2(float* scores, int64_t n) {
  __m256 max8 = _mm256_set1_ps(BitsFloat(0xff800000u));
  int64_t t = 0;
  // The score first: max_ps returns its second operand when either is NaN, so a NaN score is
  // passed over, as MaxF(max, NaN) passes over it.
  for (; t + 8 <= n; t += 8) max8 = _mm256_max_ps(_mm256_loadu_ps(scores + t), max8);
  float lanes[kSumLanes];
  _mm256_storeu_ps(lanes, max8);
  float max_score = BitsFloat(0xff800000u);
  for (int l = 0; l < 8; ++l) max_score = MaxF(max_score, lanes[l]);
  for (; t < n; ++t) max_score = MaxF(max_score, scores[t]);

  const __m256 max_v = _mm256_set1_ps(max_score);
  __m256 sum[kSumLanes / 8];
  for (__m256& s : sum) s = _mm256_setzero_ps();
  t = 0;
  for (; t + kSumLanes <= n; t += kSumLanes) {
    for (int j = 0; j < kSumLanes / 8; ++j) {
      const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + t + 8 * j), max_v));
      _mm256_storeu_ps(scores + t + 8 * j, e);
      sum[j] = _mm256_add_ps(sum[j], e);
    }
  }
  for (int j = 0; j < kSumLanes / 8; ++j) _mm256_storeu_ps(lanes + 8 * j, sum[j]);
  for (int l = 0; t + l < n; ++l) {
    scores[t + l] = ExpF(scores[t + l] - max_score);
    lanes[l] += scores[t + l];
  }
  const float sum_all = CombineLanes(lanes);
  const __m256 total = _mm256_set1_ps(sum_all);
  t = 0;
  for (; t + 8 <= n; t += 8) {
    _mm256_storeu_ps(scores + t, _mm256_div_ps(_mm256_loadu_ps(scores + t), total));
  }
  for (; t < n; ++t) scores[t] /= sum_all;
}

}  // namespace
}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_SOFTMAX_AVX2_H_
