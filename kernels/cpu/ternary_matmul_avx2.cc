// AVX2 ternary kernels. PQ2_0: each byte holds 4 codes, so shifting a 32-byte block by 0, 2,
// 4 and 6 bits yields four code planes that meet the activation's plane layout directly.
// PTQ1_0: trits are decoded 16 at a time with the (b * 3^n mod 256) * 3 >> 8 digit rule.
// maddubs sums of at most 4 * 2 * 3 * 127 = 3048 cannot saturate int16.
#include <immintrin.h>

#include <vector>

#include "kernels/block_types.h"
#include "kernels/cpu/ternary_block_combine.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/float_convert.h"

namespace walsh {
namespace {

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

inline float Finish(__m128i sums, const Q8Block128& xb) {
  alignas(16) int32_t isum[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(isum),
                  _mm_sub_epi32(sums, _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.sum))));
  return CombineSubBlocks(isum, xb.d);
}

void DecodePtq1(const block_ptq1_0& blk, uint8_t* out) {
  static constexpr int16_t kPow3[5] = {1, 3, 9, 27, 81};
  const __m256i lo8 = _mm256_set1_epi16(0xff), three = _mm256_set1_epi16(3);
  const __m256i wide =
      _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs)));
  for (int n = 0; n < 5; ++n) {
    const __m256i p = _mm256_and_si256(_mm256_mullo_epi16(wide, _mm256_set1_epi16(kPow3[n])), lo8);
    const __m256i t = _mm256_srli_epi16(_mm256_mullo_epi16(p, three), 8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + n * 16),
                     _mm_packus_epi16(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1)));
  }
  const __m128i lo8s = _mm_set1_epi16(0xff), threes = _mm_set1_epi16(3);
  const __m128i wide2 =
      _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.qs + 16)));
  for (int n = 0; n < 5; ++n) {
    const __m128i p = _mm_and_si128(_mm_mullo_epi16(wide2, _mm_set1_epi16(kPow3[n])), lo8s);
    const __m128i t = _mm_srli_epi16(_mm_mullo_epi16(p, threes), 8);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 80 + n * 8), _mm_packus_epi16(t, t));
  }
  for (int j = 0; j < 2; ++j) {
    for (int n = 0; n < 4; ++n) {
      const uint8_t p = static_cast<uint8_t>(blk.qh[j] * kPow3[n]);
      out[120 + n * 2 + j] = static_cast<uint8_t>((p * 3) >> 8);
    }
  }
}

void MatMulPq2(const TernaryWeights& w, const Q8Block128* x, int64_t n_tokens, float* y,
               int64_t y_stride, int64_t row_begin, int64_t row_end) {
  const int64_t nb = w.cols / kTernaryBlockElems;
  const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  std::vector<float> acc(n_tokens);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* row = reinterpret_cast<const block_pq2_0*>(w.data) + r * nb;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[b].qs));
      const __m256i c0 = _mm256_and_si256(qs, m3);
      const __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(qs, 2), m3);
      const __m256i c2 = _mm256_and_si256(_mm256_srli_epi16(qs, 4), m3);
      const __m256i c3 = _mm256_and_si256(_mm256_srli_epi16(qs, 6), m3);
      const float dw = Fp16ToFloat(row[b].d);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const Q8Block128& xb = x[t * nb + b];
        const auto* xq = reinterpret_cast<const __m256i*>(xb.qs);
        const __m256i s16 = _mm256_add_epi16(
            _mm256_add_epi16(_mm256_maddubs_epi16(c0, _mm256_loadu_si256(xq + 0)),
                             _mm256_maddubs_epi16(c1, _mm256_loadu_si256(xq + 1))),
            _mm256_add_epi16(_mm256_maddubs_epi16(c2, _mm256_loadu_si256(xq + 2)),
                             _mm256_maddubs_epi16(c3, _mm256_loadu_si256(xq + 3))));
        acc[t] += dw * Finish(PairSums(_mm256_madd_epi16(s16, ones)), xb);
      }
    }
    for (int64_t t = 0; t < n_tokens; ++t) y[t * y_stride + r] = acc[t];
  }
}

void MatMulPtq1(const TernaryWeights& w, const Q8Block128* x, int64_t n_tokens, float* y,
                int64_t y_stride, int64_t row_begin, int64_t row_end) {
  const int64_t nb = w.cols / kTernaryBlockElems;
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) uint8_t trits[kTernaryBlockElems];
  std::vector<float> acc(n_tokens);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* row = reinterpret_cast<const block_ptq1_0*>(w.data) + r * nb;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      DecodePtq1(row[b], trits);
      const auto* tv = reinterpret_cast<const __m256i*>(trits);
      const __m256i c0 = _mm256_load_si256(tv + 0), c1 = _mm256_load_si256(tv + 1);
      const __m256i c2 = _mm256_load_si256(tv + 2), c3 = _mm256_load_si256(tv + 3);
      const float dw = Fp16ToFloat(row[b].d);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const Q8Block128& xb = x[t * nb + b];
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
    for (int64_t t = 0; t < n_tokens; ++t) y[t * y_stride + r] = acc[t];
  }
}

}  // namespace

void TernaryMatMulQ8Avx2(const TernaryWeights& w, const Q8Block128* x, int64_t n_tokens, float* y,
                         int64_t y_stride, int64_t row_begin, int64_t row_end) {
  if (w.ggml_type == 142) {
    MatMulPq2(w, x, n_tokens, y, y_stride, row_begin, row_end);
  } else {
    MatMulPtq1(w, x, n_tokens, y, y_stride, row_begin, row_end);
  }
}

}  // namespace walsh
