// Ternary matrix times activations, straight on packed PQ2_0 / PTQ1_0 rows: weights stay
// packed and are decoded in registers; the dot product is integer per 16-element group, and the
// float steps follow one fixed order (kernels/ternary_block_combine.h, docs/format.md §8.4):
// eight group accumulators per (row, token) over the blocks of each segment in order, joined by
// a fixed pairwise tree. So every ISA path gives bit-identical results, and a token's result
// does not depend on how many tokens share the call or which thread computed the row.
#ifndef WALSH_KERNELS_CPU_TERNARY_MATMUL_H_
#define WALSH_KERNELS_CPU_TERNARY_MATMUL_H_

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/q8_activation.h"
#include "kernels/ternary_product.h"
#include "kernels/ternary_weights.h"

namespace walsh {

// The product `p` for local rows [row_begin, row_end) (see kernels/ternary_product.h), on the
// ISA's kernel; p.x holds int8 activations in Q8LayoutFor(p.w.format).
void TernaryMatMulQ8(CpuIsa isa, const TernaryProduct& p, int64_t row_begin, int64_t row_end);

// The same product with fp32 activations (p.x_f32; no activation quantization): a reference for
// tests and a debug mode of the engine. Per block s = Σ_j (code_j - 1) · x_j in order, then
// the segment accumulates dw_b · s.
void TernaryMatMulF32(const TernaryProduct& p, int64_t row_begin, int64_t row_end);

// y[t * y_stride + r] for r in [row_begin, row_end) and t < n_tokens; x holds n_tokens rows of
// cols / 128 blocks, quantized in Q8LayoutFor(w.format): the whole product of every row.
inline void TernaryMatMulQ8(CpuIsa isa, const TernaryWeights& w, const Q8Block128* x,
                            int64_t n_tokens, float* y, int64_t y_stride, int64_t row_begin,
                            int64_t row_end) {
  TernaryMatMulQ8(isa, TernaryProduct::Whole(w, x, n_tokens, y, y_stride), row_begin, row_end);
}

inline void TernaryMatMulF32(const TernaryWeights& w, const float* x, int64_t n_tokens, float* y,
                             int64_t y_stride, int64_t row_begin, int64_t row_end) {
  TernaryProduct p = TernaryProduct::Whole(w, nullptr, n_tokens, y, y_stride);
  p.x_f32 = x;
  TernaryMatMulF32(p, row_begin, row_end);
}

// Per-ISA implementations (ternary_matmul_<isa>.cc), for the dispatcher and the tests.
void TernaryMatMulQ8Scalar(const TernaryProduct& p, int64_t row_begin, int64_t row_end);
void TernaryMatMulQ8Avx2(const TernaryProduct& p, int64_t row_begin, int64_t row_end);
void TernaryMatMulQ8Avx512Vnni(const TernaryProduct& p, int64_t row_begin, int64_t row_end);
void TernaryMatMulQ8Avx512Vbmi(const TernaryProduct& p, int64_t row_begin, int64_t row_end);

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_TERNARY_MATMUL_H_
