// F32MatMulTile with AVX2, bit for bit: one vector holds an output's eight lanes, so the
// portable path's per-lane order is kept; multiplies and adds stay separate (no contraction).
// Blocks of 4 x 3 outputs keep their twelve accumulators in vector registers, each row chunk
// loaded once for three products and each weight chunk once for four.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/f32_matmul.h"

namespace walsh {
namespace {

template <int kRows, int kCols>
void Block(const float* x, int64_t in, const float* w, const float* b, int64_t out, int64_t i0,
           int64_t o0, int64_t rows, int64_t cols, float* y) {
  __m256 acc[kRows][kCols];
  for (auto& row : acc) {
    for (__m256& a : row) a = _mm256_setzero_ps();
  }
  const float* xr[kRows];
  const float* wc[kCols];
  for (int r = 0; r < kRows; ++r) xr[r] = x + (i0 + std::min<int64_t>(r, rows - 1)) * in;
  for (int c = 0; c < kCols; ++c) wc[c] = w + (o0 + std::min<int64_t>(c, cols - 1)) * in;
  const int64_t whole = in / kF32MatMulLanes * kF32MatMulLanes;
  for (int64_t k = 0; k < whole; k += kF32MatMulLanes) {
    __m256 xv[kRows];
    for (int r = 0; r < kRows; ++r) xv[r] = _mm256_loadu_ps(xr[r] + k);
    for (int c = 0; c < kCols; ++c) {
      const __m256 wv = _mm256_loadu_ps(wc[c] + k);
      for (int r = 0; r < kRows; ++r) {
        acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_mul_ps(xv[r], wv));
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      alignas(32) float a[kF32MatMulLanes];
      _mm256_store_ps(a, acc[r][c]);
      for (int64_t k = whole; k < in; ++k) a[k - whole] += xr[r][k] * wc[c][k];
      y[(i0 + r) * out + o0 + c] = CombineF32MatMulLanes(a) + b[o0 + c];
    }
  }
}

}  // namespace

void F32MatMulTileAvx2(const float* x, int64_t in, const float* w, const float* b, int64_t out,
                       const F32MatMulTile& tile, float* y) {
  constexpr int kRows = 4, kCols = 3;
  for (int64_t o0 = tile.out_begin; o0 < tile.out_end; o0 += kCols) {
    for (int64_t i0 = tile.row_begin; i0 < tile.row_end; i0 += kRows) {
      Block<kRows, kCols>(x, in, w, b, out, i0, o0, std::min<int64_t>(kRows, tile.row_end - i0),
                          std::min<int64_t>(kCols, tile.out_end - o0), y);
    }
  }
}

}  // namespace walsh
