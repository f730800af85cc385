// DenseRowDot (kernels/token_ops.h) for eight tokens at once with AVX2, bit for bit: lane t of
// one vector carries token t's sum, which takes the columns in order, so the eight sums run
// side by side with one multiply and one add per column (the shared code's operations; no
// contraction). The tokens' inputs are first transposed to [column][token].
#include <immintrin.h>

#include <vector>

#include "kernels/cpu/ops.h"

namespace walsh {
namespace {

template <typename Load>
void Rows8(const Load& load, const int64_t* rows, int64_t n_rows, int64_t cols, const float* xt,
           float* y, int64_t y_stride) {
  for (int64_t i = 0; i < n_rows; ++i) {
    const int64_t base = rows[i] * cols;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; ++c) {
      acc = _mm256_add_ps(
          acc, _mm256_mul_ps(_mm256_set1_ps(load(base + c)), _mm256_loadu_ps(xt + 8 * c)));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    for (int t = 0; t < 8; ++t) y[t * y_stride + i] = lanes[t];
  }
}

}  // namespace

void DenseRowsDot8TokensAvx2(DenseFormat format, const void* w, const int64_t* rows, int64_t n_rows,
                             int64_t cols, const float* x, int64_t x_stride, float* y,
                             int64_t y_stride) {
  thread_local std::vector<float> xt;
  xt.resize(8 * cols);
  for (int64_t c = 0; c < cols; ++c) {
    for (int t = 0; t < 8; ++t) xt[8 * c + t] = x[t * x_stride + c];
  }
  switch (format) {
    case DenseFormat::kBf16: {
      const auto* q = static_cast<const uint16_t*>(w);
      Rows8([q](int64_t k) { return Bf16ToFloat(q[k]); }, rows, n_rows, cols, xt.data(), y,
            y_stride);
      return;
    }
    case DenseFormat::kF16: {
      const auto* q = static_cast<const uint16_t*>(w);
      Rows8([q](int64_t k) { return Fp16ToFloat(q[k]); }, rows, n_rows, cols, xt.data(), y,
            y_stride);
      return;
    }
    case DenseFormat::kF32: {
      const auto* q = static_cast<const float*>(w);
      Rows8([q](int64_t k) { return q[k]; }, rows, n_rows, cols, xt.data(), y, y_stride);
      return;
    }
  }
}

}  // namespace walsh
