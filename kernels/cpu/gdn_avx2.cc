// GdnHeadStep (kernels/token_ops.h) with AVX2, bit for bit: the state update is elementwise, so
// it runs along each row as stored; only each row's two sums (the prediction S·k and the output
// S·q) must run in index order, so eight rows' products are transposed 8 x 8 and summed as one
// vector per index, lane r holding row r's running sum. Multiplies and adds stay separate, as
// in the shared code (contraction is off everywhere).
#include <immintrin.h>

#include "kernels/cpu/ops.h"

namespace walsh {
namespace {

// Rows of an 8 x 8 tile -> its columns.
inline void Transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Adds the products of eight rows (r[k] = row k's products at indices i .. i+7) to the running
// sums, index by index.
inline __m256 SumInOrder(__m256 sums, __m256 r[8]) {
  Transpose8(r);
  for (int k = 0; k < 8; ++k) sums = _mm256_add_ps(sums, r[k]);
  return sums;
}

}  // namespace

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
