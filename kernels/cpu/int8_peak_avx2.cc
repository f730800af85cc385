// Twelve independent vpmaddubsw chains: each result is the next step's unsigned operand, so the
// chains stay in registers and their number hides the instruction's latency.
#include <immintrin.h>

#include "kernels/cpu/int8_peak.h"

namespace walsh {

int32_t RunMaddubsChains(int64_t iterations) {
  const __m256i b = _mm256_set1_epi8(1);
  __m256i a[12];
  for (int k = 0; k < 12; ++k) a[k] = _mm256_set1_epi8(static_cast<char>(k));
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < 12; ++k) a[k] = _mm256_maddubs_epi16(a[k], b);
  }
  __m256i s = a[0];
  for (int k = 1; k < 12; ++k) s = _mm256_xor_si256(s, a[k]);
  return _mm256_extract_epi32(s, 0);
}

}  // namespace walsh
