// AVX2 ternary kernels. PQ2_0: each byte holds 4 codes, so shifting a 32-byte block by 0, 2,
// 4 and 6 bits yields four code planes that meet the activation's plane layout directly.
// PTQ1_0: trits are decoded 16 at a time with the (b * 3^n mod 256) * 3 >> 8 digit rule.
// maddubs sums of at most 4 * 2 * 3 * 127 = 3048 cannot saturate int16.
#include <immintrin.h>

#include <vector>

#include "kernels/block_types.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/cpu/ternary_simd_avx2.h"
#include "kernels/float_convert.h"

namespace walsh {
namespace {

using simd::DecodePtq1;
using simd::Finish;
using simd::FullSums;
using simd::PairSums;
using simd::Ptq1Codes;

void MatMulPq2(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  std::vector<float> acc(p.n_tokens);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t r = p.row_index != nullptr ? p.row_index[i] : p.row_first + i;
    const auto* row = reinterpret_cast<const block_pq2_0*>(p.w.data + r * p.w.row_bytes());
    for (int s = 0; s < p.n_segments; ++s) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) {
        const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[b].qs));
        const __m256i c0 = _mm256_and_si256(qs, m3);
        const __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(qs, 2), m3);
        const __m256i c2 = _mm256_and_si256(_mm256_srli_epi16(qs, 4), m3);
        const __m256i c3 = _mm256_and_si256(_mm256_srli_epi16(qs, 6), m3);
        const float dw = _cvtsh_ss(row[b].d);  // F16C: exact, as Fp16ToFloat
        for (int64_t t = 0; t < p.n_tokens; ++t) {
          const Q8Block128& xb = p.x[t * p.x_stride + (b - p.x_first_block)];
          const auto* xq = reinterpret_cast<const __m256i*>(xb.qs);
          const __m256i s16 = _mm256_add_epi16(
              _mm256_add_epi16(_mm256_maddubs_epi16(c0, _mm256_loadu_si256(xq + 0)),
                               _mm256_maddubs_epi16(c1, _mm256_loadu_si256(xq + 1))),
              _mm256_add_epi16(_mm256_maddubs_epi16(c2, _mm256_loadu_si256(xq + 2)),
                               _mm256_maddubs_epi16(c3, _mm256_loadu_si256(xq + 3))));
          acc[t] += dw * Finish(PairSums(_mm256_madd_epi16(s16, ones)), xb);
        }
      }
      for (int64_t t = 0; t < p.n_tokens; ++t) p.y[s][t * p.y_stride + i] = acc[t];
    }
  }
}

void MatMulPtq1(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  const __m256i ones = _mm256_set1_epi16(1);
  std::vector<float> acc(p.n_tokens);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t r = p.row_index != nullptr ? p.row_index[i] : p.row_first + i;
    const auto* row = reinterpret_cast<const block_ptq1_0*>(p.w.data + r * p.w.row_bytes());
    for (int s = 0; s < p.n_segments; ++s) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) {
        const Ptq1Codes codes = DecodePtq1(row[b]);
        const __m256i c0 = codes.c[0], c1 = codes.c[1], c2 = codes.c[2], c3 = codes.c[3];
        const float dw = _cvtsh_ss(row[b].d);  // F16C: exact, as Fp16ToFloat
        for (int64_t t = 0; t < p.n_tokens; ++t) {
          const Q8Block128& xb = p.x[t * p.x_stride + (b - p.x_first_block)];
          const auto* xq = reinterpret_cast<const __m256i*>(xb.qs);
          const __m256i v0 =
              _mm256_madd_epi16(_mm256_maddubs_epi16(c0, _mm256_loadu_si256(xq + 0)), ones);
          const __m256i v1 =
              _mm256_madd_epi16(_mm256_maddubs_epi16(c1, _mm256_loadu_si256(xq + 1)), ones);
          const __m256i v2 =
              _mm256_madd_epi16(_mm256_maddubs_epi16(c2, _mm256_loadu_si256(xq + 2)), ones);
          const __m256i v3 =
              _mm256_madd_epi16(_mm256_maddubs_epi16(c3, _mm256_loadu_si256(xq + 3)), ones);
          acc[t] += dw * Finish(FullSums(v0, v1, v2, v3), xb);
        }
      }
      for (int64_t t = 0; t < p.n_tokens; ++t) p.y[s][t * p.y_stride + i] = acc[t];
    }
  }
}

}  // namespace

void TernaryMatMulQ8Avx2(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  switch (p.w.format) {
    case TernaryFormat::kPq2_0:
      MatMulPq2(p, row_begin, row_end);
      return;
    case TernaryFormat::kPtq1_0:
      MatMulPtq1(p, row_begin, row_end);
      return;
  }
}

}  // namespace walsh
