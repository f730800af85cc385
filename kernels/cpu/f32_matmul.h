// The float32 matrix product of the vision encoder's linear layers (docs/vision.md §3):
// y[i][o] = b[o] + Σ_k W[o][k] · x[i][k], W row-major (out × in), over one tile of rows and
// outputs. Each output's terms are summed in kF32MatMulLanes lanes (lane l takes the terms
// k ≡ l mod 8, in order), the tail past the last whole chunk added to the first lanes, then the
// lanes combined pairwise in a fixed order and the bias added: the same bits on every path and
// whichever thread runs the tile.
#ifndef WALSH_KERNELS_CPU_F32_MATMUL_H_
#define WALSH_KERNELS_CPU_F32_MATMUL_H_

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace walsh {

inline constexpr int kF32MatMulLanes = 8;

struct F32MatMulTile {
  int64_t row_begin, row_end;  // rows of x and y
  int64_t out_begin, out_end;  // outputs (rows of W, columns of y)
};

// x: rows of `in` floats; w: `out` rows of `in`; b: `out`; y: rows of `out`.
void F32MatMulTileRun(CpuIsa isa, const float* x, int64_t in, const float* w, const float* b,
                      int64_t out, const F32MatMulTile& tile, float* y);

// The portable path, and the AVX2 one (it needs CpuSupports(CpuIsa::kAvx2)).
void F32MatMulTileScalar(const float* x, int64_t in, const float* w, const float* b, int64_t out,
                         const F32MatMulTile& tile, float* y);
void F32MatMulTileAvx2(const float* x, int64_t in, const float* w, const float* b, int64_t out,
                       const F32MatMulTile& tile, float* y);

// The lanes' sum in the fixed order every path uses.
inline float CombineF32MatMulLanes(const float a[kF32MatMulLanes]) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_F32_MATMUL_H_
