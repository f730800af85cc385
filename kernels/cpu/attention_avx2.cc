// AttendOneHead (kernels/token_ops.h) with AVX2 and F16C, bit for bit: each key's score is a
// dot product in dimension order, so eight keys' products are transposed 8 x 8 and summed as
// one vector per dimension, lane r holding key r's running sum; the softmax runs eight keys at a
// time (softmax_avx2.h); the weighted values accumulate key by key in position order, up to 64
// dimensions per pass held in registers. fp16 keys and values convert in hardware (exact, as
// Fp16ToFloat); q8 and q4 codes widen to floats and take their group's scale in one multiply, as
// KvLoadAt does. Multiplies and adds stay separate, as in the shared code.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/ordered_sums_avx2.h"
#include "kernels/cpu/softmax_avx2.h"
#include "kernels/cpu/width_dispatch.h"

namespace walsh {
namespace {

// Values i .. i+7 of a KV row (i a multiple of 8), as KvLoadAt gives them: fp16 converts
// exactly; a quantized group's codes times its scale, one multiply each.
inline __m256 Load8(const float* row, int64_t i) { return _mm256_loadu_ps(row + i); }
inline __m256 Load8(const uint16_t* row, int64_t i) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i)));
}
inline __m256 Load8(const KvQ8* row, int64_t i) {
  const KvQ8& g = row[i / kKvGroup];
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g.q + i % kKvGroup));
  return _mm256_mul_ps(_mm256_set1_ps(Fp16ToFloat(g.d)),
                       _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}
inline __m256 Load8(const KvQ4* row, int64_t i) {
  const KvQ4& g = row[i / kKvGroup];
  int32_t packed;
  std::memcpy(&packed, g.q + (i % kKvGroup) / 2, 4);
  const __m128i bytes = _mm_cvtsi32_si128(packed);
  const __m128i nibbles =
      _mm_unpacklo_epi8(_mm_and_si128(bytes, _mm_set1_epi8(0x0f)),
                        _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0f)));
  const __m256i n = _mm256_sub_epi32(_mm256_cvtepu8_epi32(nibbles), _mm256_set1_epi32(8));
  return _mm256_mul_ps(_mm256_set1_ps(Fp16ToFloat(g.d)), _mm256_cvtepi32_ps(n));
}

// out[i0 .. i0 + 8·kVectors) = Σ_τ weights_τ · v_τ[i], τ in position order, held in registers.
template <int kVectors, typename T>
void WeightedValues(const float* weights, const PagedKv<T>& kv, int64_t n_keys, int64_t i0,
                    float* out) {
  __m256 acc[kVectors];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int64_t t = 0; t < n_keys; ++t) {
    const __m256 weight = _mm256_set1_ps(weights[t]);
    const T* v = PagedRow(kv.v_base, kv, t);
    for (int j = 0; j < kVectors; ++j) {
      acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(weight, Load8(v, i0 + 8 * j)));
    }
  }
  for (int j = 0; j < kVectors; ++j) _mm256_storeu_ps(out + i0 + 8 * j, acc[j]);
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
      for (int r = 0; r < 8; ++r) prod[r] = _mm256_mul_ps(qi, Load8(k[r], i));
      dot = SumInOrder(dot, prod);
    }
    _mm256_storeu_ps(scores + t0, _mm256_mul_ps(dot, _mm256_set1_ps(scale)));
  }
  for (; t0 < n_keys; ++t0) scores[t0] = AttentionScore(q, head_dim, kv, t0, scale);
  // Each key's weight e_τ / sum once, not once per pass (the scores are scratch).
  SoftmaxWeightsAvx2(scores, n_keys);
  // Up to 8 vectors of the output stay in registers over every key, so each key costs its
  // value's loads alone; wider heads take more than one pass over the keys.
  for (int64_t i0 = 0; i0 < head_dim; i0 += 64) {
    DispatchWidth<8>((head_dim - i0) / 8, [&](auto vectors) {
      WeightedValues<decltype(vectors)::value>(scores, kv, n_keys, i0, out);
    });
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
template bool AttendOneHeadAvx2<KvQ8>(const float*, int64_t, const PagedKv<KvQ8>&, int64_t, float,
                                      float*, float*);
template bool AttendOneHeadAvx2<KvQ4>(const float*, int64_t, const PagedKv<KvQ4>&, int64_t, float,
                                      float*, float*);

}  // namespace walsh
