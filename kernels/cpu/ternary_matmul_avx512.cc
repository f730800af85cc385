// AVX-512 VNNI ternary kernels: vpdpbusd multiplies the unsigned codes by the int8 activations
// and sums four products per int32 lane in one instruction, over 64 bytes at a time. PQ2_0: the
// four code planes of a block pair as [plane 0 | plane 1] and [plane 2 | plane 3] against the
// activation's plane layout; PTQ1_0: the trits decoded in element order as in the AVX2 kernel.
// The integer sums are exact and the combine is the AVX2 kernel's, so the bits are the same.
#include <immintrin.h>

#include <vector>

#include "kernels/block_types.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/cpu/ternary_simd_avx2.h"

namespace walsh {
namespace {

using simd::DecodePtq1;
using simd::Finish;
using simd::FullSums;
using simd::PairSums;
using simd::Ptq1Codes;

inline __m512i Join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1);
}

void MatMulPq2(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  const __m256i m3 = _mm256_set1_epi8(3);
  std::vector<float> acc(p.n_tokens);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t r = p.row_index != nullptr ? p.row_index[i] : p.row_first + i;
    const auto* row = reinterpret_cast<const block_pq2_0*>(p.w.data + r * p.w.row_bytes());
    for (int s = 0; s < p.n_segments; ++s) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) {
        const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[b].qs));
        const __m512i c01 =
            Join(_mm256_and_si256(qs, m3), _mm256_and_si256(_mm256_srli_epi16(qs, 2), m3));
        const __m512i c23 = Join(_mm256_and_si256(_mm256_srli_epi16(qs, 4), m3),
                                 _mm256_and_si256(_mm256_srli_epi16(qs, 6), m3));
        const float dw = _cvtsh_ss(row[b].d);  // F16C: exact, as Fp16ToFloat
        for (int64_t t = 0; t < p.n_tokens; ++t) {
          const Q8Block128& xb = p.x[t * p.x_stride + (b - p.x_first_block)];
          __m512i v = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c01, _mm512_loadu_si512(xb.qs));
          v = _mm512_dpbusd_epi32(v, c23, _mm512_loadu_si512(xb.qs + 64));
          // Lane L of the planes (p, p + 1) holds positions 4L..4L+3 of plane p (L < 8) or of
          // plane p + 1: sub-block L / 2 either way, so fold the halves, then pair the lanes.
          const __m256i folded =
              _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
          acc[t] += dw * Finish(PairSums(folded), xb);
        }
      }
      for (int64_t t = 0; t < p.n_tokens; ++t) p.y[s][t * p.y_stride + i] = acc[t];
    }
  }
}

void MatMulPtq1(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  std::vector<float> acc(p.n_tokens);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t r = p.row_index != nullptr ? p.row_index[i] : p.row_first + i;
    const auto* row = reinterpret_cast<const block_ptq1_0*>(p.w.data + r * p.w.row_bytes());
    for (int s = 0; s < p.n_segments; ++s) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) {
        const Ptq1Codes codes = DecodePtq1(row[b]);
        const __m512i c01 = Join(codes.c[0], codes.c[1]), c23 = Join(codes.c[2], codes.c[3]);
        const float dw = _cvtsh_ss(row[b].d);  // F16C: exact, as Fp16ToFloat
        for (int64_t t = 0; t < p.n_tokens; ++t) {
          const Q8Block128& xb = p.x[t * p.x_stride + (b - p.x_first_block)];
          const __m512i v01 =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), c01, _mm512_loadu_si512(xb.qs));
          const __m512i v23 =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), c23, _mm512_loadu_si512(xb.qs + 64));
          acc[t] +=
              dw * Finish(FullSums(_mm512_castsi512_si256(v01), _mm512_extracti64x4_epi64(v01, 1),
                                   _mm512_castsi512_si256(v23), _mm512_extracti64x4_epi64(v23, 1)),
                          xb);
        }
      }
      for (int64_t t = 0; t < p.n_tokens; ++t) p.y[s][t * p.y_stride + i] = acc[t];
    }
  }
}

}  // namespace

void TernaryMatMulQ8Avx512Vnni(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
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
