#include "kernels/hadamard_ref.h"

#include <cmath>

namespace walsh {

void FwhtBlockRef(float* v, int64_t block) {
  for (int64_t h = 1; h < block; h *= 2) {
    for (int64_t i = 0; i < block; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const float a = v[j];
        const float b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(block)));
  for (int64_t j = 0; j < block; ++j) v[j] *= scale;
}

void SignedFwhtForwardRef(const float* x, const int8_t* signs, int64_t n, int64_t block,
                          float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = signs != nullptr && signs[i] < 0 ? -x[i] : x[i];
  for (int64_t b = 0; b < n; b += block) FwhtBlockRef(out + b, block);
}

void SignedFwhtInverseRef(const float* x, const int8_t* signs, int64_t n, int64_t block,
                          float* out) {
  if (out != x) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i];
  }
  for (int64_t b = 0; b < n; b += block) FwhtBlockRef(out + b, block);
  if (signs != nullptr) {
    for (int64_t i = 0; i < n; ++i) out[i] = signs[i] < 0 ? -out[i] : out[i];
  }
}

void GdnPermuteRef(const float* in, int64_t n_k, int64_t rep, int64_t hd, float* out) {
  for (int64_t k = 0; k < n_k; ++k) {
    for (int64_t r = 0; r < rep; ++r) {
      for (int64_t d = 0; d < hd; ++d) out[(k * rep + r) * hd + d] = in[(r * n_k + k) * hd + d];
    }
  }
}

void GdnUnpermuteRef(const float* in, int64_t n_k, int64_t rep, int64_t hd, float* out) {
  for (int64_t k = 0; k < n_k; ++k) {
    for (int64_t r = 0; r < rep; ++r) {
      for (int64_t d = 0; d < hd; ++d) out[(r * n_k + k) * hd + d] = in[(k * rep + r) * hd + d];
    }
  }
}

}  // namespace walsh
