// The float32 matrix product of the vision encoder's linear layers (docs/vision.md §3):
// y[i][o] = b[o] + Σ_k W[o][k] · x[i][k], W row-major (out × in), over one tile of rows and
// outputs. Each output's terms are summed in kF32MatMulLanes lanes in the order of
// kernels/vision_numerics.h: the same bits on every path, whichever thread runs the tile, and on
// the CUDA encoder.
#ifndef WALSH_KERNELS_CPU_F32_MATMUL_H_
#define WALSH_KERNELS_CPU_F32_MATMUL_H_

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/vision_numerics.h"

namespace walsh {

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

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_F32_MATMUL_H_
