// Portable reference of the integer ternary kernels: plain loops, one element at a time, in the
// combine order of kernels/ternary_block_combine.h.
#include <cstring>
#include <vector>

#include "kernels/block_types.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/ternary_block_combine.h"
#include "kernels/ternary_block_decode.h"

namespace walsh {

void TernaryMatMulQ8Scalar(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  const Q8Layout layout = Q8LayoutFor(p.w.format);
  int position[kTernaryBlockElems];  // where element e sits in an activation block's qs
  for (int i = 0; i < kTernaryBlockElems; ++i) position[Q8ElementAt(layout, i)] = i;
  uint8_t codes[kTernaryBlockElems];
  std::vector<float> acc(p.n_tokens * kQ8Groups);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t r = p.row_index != nullptr ? p.row_index[i] : p.row_first + i;
    const uint8_t* row = p.w.data + r * p.w.row_bytes();
    for (int s = 0; s < p.n_segments; ++s) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) {
        const float dw = DecodeTernaryBlock(p.w.format, row, b, codes);
        // The block's weights and each token's activations in plain local arrays, read whole:
        // the same products as indexing the originals, with one checked load per array under a
        // sanitizer instead of one per element.
        int32_t weight[kTernaryBlockElems];
        for (int e = 0; e < kTernaryBlockElems; ++e) weight[e] = codes[e] - 1;
        for (int64_t t = 0; t < p.n_tokens; ++t) {
          const Q8Block128& xb = p.x[t * p.x_stride + (b - p.x_first_block)];
          int8_t qs[sizeof(xb.qs)];
          std::memcpy(qs, xb.qs, sizeof(qs));
          for (int g = 0; g < kQ8Groups; ++g) {
            int32_t isum = 0;
            for (int e = 16 * g; e < 16 * g + 16; ++e) isum += weight[e] * qs[position[e]];
            const int lane = Q8GroupLane(layout, g);
            float& a = acc[t * kQ8Groups + g];
            a = AccumulateGroup(a, isum, dw, xb.d[lane]);
          }
        }
      }
      for (int64_t t = 0; t < p.n_tokens; ++t) {
        p.y[s][t * p.y_stride + i] = JoinGroups(&acc[t * kQ8Groups]);
      }
    }
  }
}

}  // namespace walsh
