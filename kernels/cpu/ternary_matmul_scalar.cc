// Portable reference of the integer ternary kernels: plain loops, one element at a time.
#include <vector>

#include "kernels/block_types.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/ternary_block_combine.h"
#include "kernels/ternary_block_decode.h"

namespace walsh {

void TernaryMatMulQ8Scalar(const TernaryWeights& w, const Q8Block128* x, int64_t n_tokens, float* y,
                           int64_t y_stride, int64_t row_begin, int64_t row_end) {
  const int64_t nb = w.cols / kTernaryBlockElems;
  const Q8Layout layout = Q8LayoutFor(w.format);
  uint8_t codes[kTernaryBlockElems];
  std::vector<float> acc(n_tokens);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.data + r * w.row_bytes();
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      const float dw = DecodeTernaryBlock(w.format, row, b, codes);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const Q8Block128& xb = x[t * nb + b];
        int32_t isum[4] = {0, 0, 0, 0};
        for (int i = 0; i < kTernaryBlockElems; ++i) {
          const int e = Q8ElementAt(layout, i);
          isum[e / kQ8SubBlock] += (codes[e] - 1) * xb.qs[i];
        }
        acc[t] += dw * CombineSubBlocks(isum, xb.d);
      }
    }
    for (int64_t t = 0; t < n_tokens; ++t) y[t * y_stride + r] = acc[t];
  }
}

}  // namespace walsh
