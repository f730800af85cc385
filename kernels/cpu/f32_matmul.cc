#include "kernels/cpu/f32_matmul.h"

#include <algorithm>

namespace walsh {
namespace {

constexpr int kMicroRows = 4, kMicroCols = 4;
constexpr int kLanes = kF32MatMulLanes;

// A kMicroRows x kMicroCols block of rows and outputs: 16 accumulators of kLanes lanes, so each
// x and w chunk loaded serves four products (the compiler vectorizes each lane loop).
void MicroBlock(const float* x, int64_t in, const float* w, const float* b, int64_t out, int64_t i0,
                int64_t o0, int64_t rows, int64_t cols, float* y) {
  float acc[kMicroRows][kMicroCols][kLanes] = {};
  const float* xr[kMicroRows];
  const float* wc[kMicroCols];
  for (int r = 0; r < kMicroRows; ++r) xr[r] = x + (i0 + std::min<int64_t>(r, rows - 1)) * in;
  for (int c = 0; c < kMicroCols; ++c) wc[c] = w + (o0 + std::min<int64_t>(c, cols - 1)) * in;
  const int64_t whole = in / kLanes * kLanes;
  for (int64_t k = 0; k < whole; k += kLanes) {
    for (int r = 0; r < kMicroRows; ++r) {
      for (int c = 0; c < kMicroCols; ++c) {
        for (int l = 0; l < kLanes; ++l) acc[r][c][l] += xr[r][k + l] * wc[c][k + l];
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float* a = acc[r][c];
      for (int64_t k = whole; k < in; ++k) a[k - whole] += xr[r][k] * wc[c][k];
      y[(i0 + r) * out + o0 + c] = CombineF32MatMulLanes(a) + b[o0 + c];
    }
  }
}

}  // namespace

void F32MatMulTileScalar(const float* x, int64_t in, const float* w, const float* b, int64_t out,
                         const F32MatMulTile& tile, float* y) {
  for (int64_t o0 = tile.out_begin; o0 < tile.out_end; o0 += kMicroCols) {
    for (int64_t i0 = tile.row_begin; i0 < tile.row_end; i0 += kMicroRows) {
      MicroBlock(x, in, w, b, out, i0, o0, std::min<int64_t>(kMicroRows, tile.row_end - i0),
                 std::min<int64_t>(kMicroCols, tile.out_end - o0), y);
    }
  }
}

void F32MatMulTileRun(CpuIsa isa, const float* x, int64_t in, const float* w, const float* b,
                      int64_t out, const F32MatMulTile& tile, float* y) {
#if WALSH_X86_KERNELS
  if (isa != CpuIsa::kScalar) return F32MatMulTileAvx2(x, in, w, b, out, tile, y);
#endif
  F32MatMulTileScalar(x, in, w, b, out, tile, y);
}

}  // namespace walsh
