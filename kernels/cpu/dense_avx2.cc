// DenseRowDot (kernels/token_ops.h) for eight tokens at once with AVX2, bit for bit: each
// (row, token) sum runs in the shared 32 lanes, held as four vectors (lane_sums_avx2.h); the
// row's chunk of 32 weights is converted once and used for all eight tokens. Multiplies and
// adds stay separate, as in the shared code (no contraction).
#include <immintrin.h>

#include "kernels/cpu/lane_sums_avx2.h"
#include "kernels/cpu/ops.h"

namespace walsh {
namespace {

inline __m256 Load8(DenseFormat format, const void* w, int64_t k) {
  switch (format) {
    case DenseFormat::kBf16: {
      const __m128i h =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + k));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case DenseFormat::kF16:
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + k)));
    case DenseFormat::kF32:
      break;
  }
  return _mm256_loadu_ps(static_cast<const float*>(w) + k);
}

}  // namespace

void DenseRowsDot8TokensAvx2(DenseFormat format, const void* w, const int64_t* rows, int64_t n_rows,
                             int64_t cols, const float* x, int64_t x_stride, float* y,
                             int64_t y_stride) {
  if (cols % kSumLanes != 0) {
    for (int t = 0; t < 8; ++t)
      DenseRowsDot(format, w, rows, n_rows, cols, x + t * x_stride, y + t * y_stride);
    return;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t base_k = rows[r] * cols;
    __m256 lanes[8][4];
    for (auto& token : lanes) {
      for (__m256& l : token) l = _mm256_setzero_ps();
    }
    for (int64_t base = 0; base < cols; base += kSumLanes) {
      __m256 wv[4];
      for (int v = 0; v < 4; ++v) wv[v] = Load8(format, w, base_k + base + 8 * v);
      for (int t = 0; t < 8; ++t) {
        const float* xt = x + t * x_stride + base;
        for (int v = 0; v < 4; ++v) {
          lanes[t][v] =
              _mm256_add_ps(lanes[t][v], _mm256_mul_ps(wv[v], _mm256_loadu_ps(xt + 8 * v)));
        }
      }
    }
    for (int t = 0; t < 8; ++t) y[t * y_stride + r] = CombineLanes32(lanes[t]);
  }
}

}  // namespace walsh
