// GdnHeadStep (kernels/token_ops.h) with AVX2, bit for bit: the state update is elementwise,
// and each row's two sums (the prediction S·k and the output S·q) run in the shared 32 lanes,
// held as four vectors (lane_sums_avx2.h) and added chunk of 32 by chunk of 32. Multiplies and
// adds stay separate, as in the shared code (contraction is off everywhere).
#include <immintrin.h>

#include "kernels/cpu/lane_sums_avx2.h"
#include "kernels/cpu/ops.h"

namespace walsh {

bool GdnHeadStepAvx2(const GdnLayerParams& p, const float* u, const float* z,
                     const float* alpha_raw, const float* beta_raw, int64_t h, float* S,
                     float* out) {
  if (p.hd % kSumLanes != 0) return false;
  float beta, decay;
  GdnHeadGates(p, alpha_raw, beta_raw, h, &beta, &decay);
  const int64_t kh = p.key_head_of(h), hd = p.hd;
  const float* qq = u + kh * hd;
  const float* kk = u + p.key_dim() + kh * hd;
  const float* vv = u + 2 * p.key_dim() + h * hd;
  float* o = out + h * hd;
  const __m256 decay8 = _mm256_set1_ps(decay);
  const float norm = RsqrtF(static_cast<float>(hd));
  for (int64_t j = 0; j < hd; ++j) {
    float* row = S + (h * hd + j) * hd;
    __m256 lanes[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
    for (int64_t base = 0; base < hd; base += kSumLanes) {
      for (int v = 0; v < 4; ++v) {
        const int64_t i = base + 8 * v;
        const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row + i), decay8);
        _mm256_storeu_ps(row + i, s);
        lanes[v] = _mm256_add_ps(lanes[v], _mm256_mul_ps(s, _mm256_loadu_ps(kk + i)));
      }
    }
    const __m256 delta8 = _mm256_set1_ps(beta * (vv[j] - CombineLanes32(lanes)));
    for (__m256& l : lanes) l = _mm256_setzero_ps();
    for (int64_t base = 0; base < hd; base += kSumLanes) {
      for (int v = 0; v < 4; ++v) {
        const int64_t i = base + 8 * v;
        const __m256 s =
            _mm256_add_ps(_mm256_loadu_ps(row + i), _mm256_mul_ps(delta8, _mm256_loadu_ps(kk + i)));
        _mm256_storeu_ps(row + i, s);
        lanes[v] = _mm256_add_ps(lanes[v], _mm256_mul_ps(s, _mm256_loadu_ps(qq + i)));
      }
    }
    o[j] = norm * CombineLanes32(lanes);
  }
  const float scale = RmsNormScale(o, hd, p.eps);
  for (int64_t j = 0; j < hd; ++j) o[j] = GdnGateOutput(p, o, scale, z, h, j);
  return true;
}

}  // namespace walsh
