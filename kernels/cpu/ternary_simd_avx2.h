// The AVX2 building blocks of the ternary kernels (ternary_matmul_avx2.cc and the AVX-512 file
// that reuses them): lane sums in the combine order of kernels/ternary_block_combine.h, and
// PTQ1_0 trit decoding in registers. Included only by files compiled for AVX2 and F16C.
#ifndef WALSH_KERNELS_CPU_TERNARY_SIMD_AVX2_H_
#define WALSH_KERNELS_CPU_TERNARY_SIMD_AVX2_H_

#include <immintrin.h>

#include "kernels/block_types.h"
#include "kernels/q8_activation.h"

namespace walsh {
namespace simd {

// Sums 8 int32 lanes in pairs: [l0+l1, l2+l3, l4+l5, l6+l7] (sub-blocks of the plane layout).
inline __m128i PairSums(__m256i v) {
  const __m256i h = _mm256_hadd_epi32(v, v);  // [a01 a23 a01 a23 | a45 a67 a45 a67]
  return _mm_unpacklo_epi64(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Full sums of four 8-lane vectors: [Σv0, Σv1, Σv2, Σv3].
inline __m128i FullSums(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// CombineSubBlocks in registers: p = float(isum) * d, then (p0 + p1) + (p2 + p3) by two
// horizontal adds, the same operations in the same order.
inline float Finish(__m128i sums, const Q8Block128& xb) {
  const __m128i isum =
      _mm_sub_epi32(sums, _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.sum)));
  const __m128 p = _mm_mul_ps(_mm_cvtepi32_ps(isum), _mm_loadu_ps(xb.d));
  const __m128 h = _mm_hadd_ps(p, p);
  return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

// Digit n of byte b is ((b * 3^n) mod 256) * 3 >> 8. With b in the high byte of a 16-bit
// lane, mullo by 3^n leaves (b * 3^n mod 256) << 8, and mulhi by 3 yields the digit. The
// 128 trits are assembled in registers, in element order, as four 32-byte code vectors
// (going through memory would stall on store forwarding).
struct Ptq1Codes {
  __m256i c[4];
};

inline __m256i Digits16(__m256i high, int16_t pow3) {
  return _mm256_mulhi_epu16(_mm256_mullo_epi16(high, _mm256_set1_epi16(pow3)),
                            _mm256_set1_epi16(3));
}

inline __m128i Digits8(__m128i high, __m128i pow3) {
  return _mm_mulhi_epu16(_mm_mullo_epi16(high, pow3), _mm_set1_epi16(3));
}

// Two 16-lane digit vectors -> 32 bytes in element order.
inline __m256i Pack32(__m256i a, __m256i b) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xd8);
}

inline __m128i Pack16(__m256i a) {
  return _mm_packus_epi16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
}

inline Ptq1Codes DecodePtq1(const block_ptq1_0& blk) {
  // Stage 1: qs[0..15], digit n of byte m is element 16n + m.
  const __m256i h1 = _mm256_slli_epi16(
      _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs))), 8);
  // Stage 2: qs[16..23], digit n of byte m is element 80 + 8n + m.
  const __m128i h2 = _mm_slli_epi16(
      _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.qs + 16))), 8);
  // qh: digit n of byte j is element 120 + 2n + j; lanes [j=0, j=1] x n = 0..3.
  const __m128i hq = _mm_slli_epi16(_mm_setr_epi16(blk.qh[0], blk.qh[1], blk.qh[0], blk.qh[1],
                                                   blk.qh[0], blk.qh[1], blk.qh[0], blk.qh[1]),
                                    8);
  Ptq1Codes out;
  out.c[0] = Pack32(Digits16(h1, 1), Digits16(h1, 3));
  out.c[1] = Pack32(Digits16(h1, 9), Digits16(h1, 27));
  const __m128i s0 = Digits8(h2, _mm_set1_epi16(1)), s1 = Digits8(h2, _mm_set1_epi16(3));
  const __m128i s2 = Digits8(h2, _mm_set1_epi16(9)), s3 = Digits8(h2, _mm_set1_epi16(27));
  const __m128i s4 = Digits8(h2, _mm_set1_epi16(81));
  const __m128i q = Digits8(hq, _mm_setr_epi16(1, 1, 3, 3, 9, 9, 27, 27));
  out.c[2] = _mm256_set_m128i(_mm_packus_epi16(s0, s1), Pack16(Digits16(h1, 81)));
  out.c[3] = _mm256_set_m128i(_mm_packus_epi16(s4, q), _mm_packus_epi16(s2, s3));
  return out;
}

}  // namespace simd
}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_TERNARY_SIMD_AVX2_H_
