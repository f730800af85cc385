// GdnHeadStep (kernels/token_ops.h) with AVX2, bit for bit: the state update is elementwise, so
// it runs along each row as stored; only each row's two sums (the prediction S·k and the output
// S·q) must run in index order, so eight rows' products are transposed 8 x 8 and summed as one
// vector per index, lane r holding row r's running sum. Multiplies and adds stay separate, as
// in the shared code (contraction is off everywhere).
#include <immintrin.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/ordered_sums_avx2.h"

namespace walsh {

bool GdnHeadStepAvx2(const GdnLayerParams& p, const float* u, const float* z,
                     const float* alpha_raw, const float* beta_raw, int64_t h, float* S,
                     float* out) {
  if (p.hd % 8 != 0) return false;
  float beta, decay;
  GdnHeadGates(p, alpha_raw, beta_raw, h, &beta, &decay);
  const int64_t kh = p.key_head_of(h), hd = p.hd;
  const float* qq = u + kh * hd;
  const float* kk = u + p.key_dim() + kh * hd;
  const float* vv = u + 2 * p.key_dim() + h * hd;
  float* o = out + h * hd;
  const __m256 decay8 = _mm256_set1_ps(decay), beta8 = _mm256_set1_ps(beta);
  const __m256 norm8 = _mm256_set1_ps(RsqrtF(static_cast<float>(hd)));
  for (int64_t j = 0; j < hd; j += 8) {
    float* rows = S + (h * hd + j) * hd;
    __m256 pred = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd; i += 8) {
      const __m256 k = _mm256_loadu_ps(kk + i);
      __m256 prod[8];
      for (int r = 0; r < 8; ++r) {
        const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(rows + r * hd + i), decay8);
        _mm256_storeu_ps(rows + r * hd + i, s);
        prod[r] = _mm256_mul_ps(s, k);
      }
      pred = SumInOrder(pred, prod);
    }
    const __m256 delta = _mm256_mul_ps(beta8, _mm256_sub_ps(_mm256_loadu_ps(vv + j), pred));
    alignas(32) float d[8];
    _mm256_store_ps(d, delta);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd; i += 8) {
      const __m256 k = _mm256_loadu_ps(kk + i), q = _mm256_loadu_ps(qq + i);
      __m256 prod[8];
      for (int r = 0; r < 8; ++r) {
        const __m256 s = _mm256_add_ps(_mm256_loadu_ps(rows + r * hd + i),
                                       _mm256_mul_ps(_mm256_set1_ps(d[r]), k));
        _mm256_storeu_ps(rows + r * hd + i, s);
        prod[r] = _mm256_mul_ps(s, q);
      }
      acc = SumInOrder(acc, prod);
    }
    _mm256_storeu_ps(o + j, _mm256_mul_ps(norm8, acc));
  }
  const float scale = RmsNormScale(o, hd, p.eps);
  for (int64_t j = 0; j < hd; ++j) o[j] = GdnGateOutput(p, o, scale, z, h, j);
  return true;
}

}  // namespace walsh
