// Twelve independent vpdpbusd chains, on 256-bit (AVX512VL) or 512-bit registers: each
// accumulates into itself.
#include <immintrin.h>

#include "kernels/cpu/int8_peak.h"

namespace walsh {

int32_t RunDpbusdChains(int64_t iterations) {
  const __m256i a = _mm256_set1_epi8(1), b = _mm256_set1_epi8(1);
  __m256i acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm256_set1_epi32(k);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < 12; ++k) acc[k] = _mm256_dpbusd_epi32(acc[k], a, b);
  }
  __m256i s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm256_xor_si256(s, acc[k]);
  return _mm256_extract_epi32(s, 0);
}

int32_t RunDpbusd512Chains(int64_t iterations) {
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(1);
  __m512i acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm512_set1_epi32(k);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < 12; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
  }
  __m512i s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm512_xor_si512(s, acc[k]);
  return _mm_cvtsi128_si32(_mm512_castsi512_si128(s));
}

}  // namespace walsh
