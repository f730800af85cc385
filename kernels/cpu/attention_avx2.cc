// AttendOneHead (kernels/token_ops.h) with AVX2 and F16C, bit for bit: each key's score is a
// dot product in dimension order, so eight keys' products are transposed 8 x 8 and summed as
// one vector per dimension, lane r holding key r's running sum; the weighted values accumulate
// key by key in position order across all dimensions at once. fp16 keys and values convert in
// hardware (exact, as Fp16ToFloat). Multiplies and adds stay separate, as in the shared code.
#include <immintrin.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/ordered_sums_avx2.h"

namespace walsh {
namespace {

inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <typename T>
void Attend(const float* q, int64_t head_dim, const PagedKv<T>& kv, int64_t n_keys, float scale,
            float* scores, float* out) {
  int64_t t0 = 0;
  for (; t0 + 8 <= n_keys; t0 += 8) {
    const T* k[8];
    for (int r = 0; r < 8; ++r) k[r] = PagedRow(kv.k_base, kv, t0 + r);
    __m256 dot = _mm256_setzero_ps();
    for (int64_t i = 0; i < head_dim; i += 8) {
      const __m256 qi = _mm256_loadu_ps(q + i);
      __m256 prod[8];
      for (int r = 0; r < 8; ++r) prod[r] = _mm256_mul_ps(qi, Load8(k[r] + i));
      dot = SumInOrder(dot, prod);
    }
    _mm256_storeu_ps(scores + t0, _mm256_mul_ps(dot, _mm256_set1_ps(scale)));
  }
  for (; t0 < n_keys; ++t0) scores[t0] = AttentionScore(q, head_dim, kv, t0, scale);
  const float sum = SoftmaxNumerators(scores, n_keys);
  for (int64_t i = 0; i < head_dim; i += 8) _mm256_storeu_ps(out + i, _mm256_setzero_ps());
  for (int64_t t = 0; t < n_keys; ++t) {
    const __m256 weight = _mm256_set1_ps(scores[t] / sum);
    const T* v = PagedRow(kv.v_base, kv, t);
    for (int64_t i = 0; i < head_dim; i += 8) {
      _mm256_storeu_ps(
          out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_mul_ps(weight, Load8(v + i))));
    }
  }
}

}  // namespace

template <typename T>
bool AttendOneHeadAvx2(const float* q, int64_t head_dim, const PagedKv<T>& kv, int64_t n_keys,
                       float scale, float* scores, float* out) {
  if (head_dim % 8 != 0) return false;
  Attend(q, head_dim, kv, n_keys, scale, scores, out);
  return true;
}

template bool AttendOneHeadAvx2<float>(const float*, int64_t, const PagedKv<float>&, int64_t, float,
                                       float*, float*);
template bool AttendOneHeadAvx2<uint16_t>(const float*, int64_t, const PagedKv<uint16_t>&, int64_t,
                                          float, float*, float*);

}  // namespace walsh
