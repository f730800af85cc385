#include "kernels/cpu/ternary_matmul.h"

#include <vector>

#include "kernels/block_types.h"
#include "kernels/cpu/isa.h"
#include "kernels/ternary_block_decode.h"

namespace walsh {

void TernaryMatMulQ8(CpuIsa isa, const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  switch (isa) {
#if WALSH_X86_KERNELS
    case CpuIsa::kAvx512Vbmi:
      TernaryMatMulQ8Avx512Vbmi(p, row_begin, row_end);
      return;
    case CpuIsa::kAvx512Vnni:
      TernaryMatMulQ8Avx512Vnni(p, row_begin, row_end);
      return;
    case CpuIsa::kAvx2:
      TernaryMatMulQ8Avx2(p, row_begin, row_end);
      return;
#else
    case CpuIsa::kAvx512Vbmi:  // not in a scalar-only build (CpuSupports says so)
    case CpuIsa::kAvx512Vnni:
    case CpuIsa::kAvx2:
#endif
    case CpuIsa::kScalar:
      TernaryMatMulQ8Scalar(p, row_begin, row_end);
      return;
  }
}

void TernaryMatMulF32(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  uint8_t codes[kTernaryBlockElems];
  std::vector<float> acc(p.n_tokens);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t r = p.row_index != nullptr ? p.row_index[i] : p.row_first + i;
    const uint8_t* row = p.w.data + r * p.w.row_bytes();
    for (int s = 0; s < p.n_segments; ++s) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) {
        const float dw = DecodeTernaryBlock(p.w.format, row, b, codes);
        for (int64_t t = 0; t < p.n_tokens; ++t) {
          const float* xb = p.x_f32 + (t * p.x_stride + (b - p.x_first_block)) * kTernaryBlockElems;
          float sum = 0.0f;
          for (int j = 0; j < kTernaryBlockElems; ++j) {
            sum += static_cast<float>(codes[j] - 1) * xb[j];
          }
          acc[t] += dw * sum;
        }
      }
      for (int64_t t = 0; t < p.n_tokens; ++t) p.y[s][t * p.y_stride + i] = acc[t];
    }
  }
}

}  // namespace walsh
