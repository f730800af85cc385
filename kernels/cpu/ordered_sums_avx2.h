// Eight running sums that must each take their terms in index order, kept as the eight lanes of
// one AVX2 vector: the terms arrive as eight rows of eight (row r's terms at indices i .. i+7),
// are transposed 8 x 8, and are added index by index. The GatedDeltaNet and attention fast
// paths (gdn_avx2.cc, attention_avx2.cc) sum their rows' and keys' dot products this way, bit
// for bit with the shared one-at-a-time loops. Included only by files compiled for AVX2;
// internal linkage, so no other file links this ISA's copy.
#ifndef WALSH_KERNELS_CPU_ORDERED_SUMS_AVX2_H_
#define WALSH_KERNELS_CPU_ORDERED_SUMS_AVX2_H_

#include <immintrin.h>

namespace walsh {
namespace {

// Rows of an 8 x 8 tile -> its columns.
inline void Transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Adds eight rows' terms (terms[r] = row r's terms at indices i .. i+7) to the running sums,
// index by index; lane r of `sums` is row r's sum.
inline __m256 SumInOrder(__m256 sums, __m256 terms[8]) {
  Transpose8(terms);
  for (int k = 0; k < 8; ++k) sums = _mm256_add_ps(sums, terms[k]);
  return sums;
}

}  // namespace
}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_ORDERED_SUMS_AVX2_H_
