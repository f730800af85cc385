#include "kernels/cpu/ternary_matmul.h"

#include <vector>

#include "kernels/block_types.h"
#include "kernels/ternary_block_decode.h"

namespace walsh {

void TernaryMatMulQ8(CpuIsa isa, const TernaryWeights& w, const Q8Block128* x, int64_t n_tokens,
                     float* y, int64_t y_stride, int64_t row_begin, int64_t row_end) {
  switch (isa) {
    case CpuIsa::kAvx512Vnni:  // no AVX-512 kernel yet: the AVX2 one is exact there too
    case CpuIsa::kAvx2:
      TernaryMatMulQ8Avx2(w, x, n_tokens, y, y_stride, row_begin, row_end);
      return;
    case CpuIsa::kScalar:
      TernaryMatMulQ8Scalar(w, x, n_tokens, y, y_stride, row_begin, row_end);
      return;
  }
}

void TernaryMatMulF32(const TernaryWeights& w, const float* x, int64_t n_tokens, float* y,
                      int64_t y_stride, int64_t row_begin, int64_t row_end) {
  const int64_t nb = w.cols / kTernaryBlockElems;
  uint8_t codes[kTernaryBlockElems];
  std::vector<float> acc(n_tokens);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.data + r * w.row_bytes();
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      const float dw = DecodeTernaryBlock(w.format, row, b, codes);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xb = x + t * w.cols + b * kTernaryBlockElems;
        float s = 0.0f;
        for (int j = 0; j < kTernaryBlockElems; ++j) s += static_cast<float>(codes[j] - 1) * xb[j];
        acc[t] += dw * s;
      }
    }
    for (int64_t t = 0; t < n_tokens; ++t) y[t * y_stride + r] = acc[t];
  }
}

}  // namespace walsh
