#include <immintrin.h>

#include "kernels/cpu/memory_bandwidth.h"

namespace walsh {

float SumFourStreamsAvx2(const float* p, int64_t n) {
  // Four quarters read side by side: four hardware prefetch streams, four dependency chains.
  const int64_t q = n / 4 / 8 * 8;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < q; i += 8) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + q + i));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + 2 * q + i));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + 3 * q + i));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0;
  for (float l : lanes) total += l;
  return total;
}

}  // namespace walsh
