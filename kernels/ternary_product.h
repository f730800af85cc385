// One ternary product as every kernel path (CPU ISAs, CUDA) takes it: packed weights times
// activations for a selection of rows, over one or more segments of the input, each with its
// own output. A segment is a window [begin, end) of 128-weight blocks of every row; its output
// is the row's sum over the window's blocks in the combine order of
// kernels/ternary_block_combine.h (eight group accumulators over the blocks in order, then a
// fixed tree), written to y_s[t · y_stride + i] for local row i (weight row row_index[i], or
// row_first + i), token t. A projection computed whole has one segment spanning the row; a
// row-parallel projection has the canonical slices of docs/architecture.md "Exact tensor
// parallelism", which ranks may hold a subset of.
#ifndef WALSH_KERNELS_TERNARY_PRODUCT_H_
#define WALSH_KERNELS_TERNARY_PRODUCT_H_

#include <stdint.h>

#include "kernels/q8_activation.h"
#include "kernels/ternary_weights.h"

namespace walsh {

inline constexpr int kMaxProductSegments = 8;

struct TernaryProduct {
  TernaryWeights w;
  // Activations of token t for weight block b: x[t · x_stride + (b - x_first_block)] (int8
  // blocks), or the 128 floats at x_f32 + t · x_stride · 128 + (b - x_first_block) · 128.
  const Q8Block128* x = nullptr;
  const float* x_f32 = nullptr;
  int64_t x_stride = 0, x_first_block = 0, n_tokens = 0;
  const int32_t* row_index = nullptr;  // local row i is weight row row_index[i],
  int64_t row_first = 0;               // or, without an index, row_first + i
  int n_segments = 1;
  int64_t segment_begin[kMaxProductSegments] = {};
  int64_t segment_end[kMaxProductSegments] = {};
  float* y[kMaxProductSegments] = {};
  int64_t y_stride = 0;

  // The whole product y = x Wᵀ: every row, one segment over all blocks, x and y dense.
  static TernaryProduct Whole(const TernaryWeights& w, const Q8Block128* x, int64_t n_tokens,
                              float* y, int64_t y_stride) {
    TernaryProduct p;
    p.w = w;
    p.x = x;
    p.x_stride = w.blocks_per_row();
    p.n_tokens = n_tokens;
    p.segment_end[0] = w.blocks_per_row();
    p.y[0] = y;
    p.y_stride = y_stride;
    return p;
  }
};

}  // namespace walsh

#endif  // WALSH_KERNELS_TERNARY_PRODUCT_H_
