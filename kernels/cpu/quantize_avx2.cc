// QuantizeRowQ8 (kernels/token_ops.h, QuantizeBlockQ8) with AVX2, bit for bit: the maximum is
// exact in any order once NaNs are skipped as MaxF skips them; the scale is the scalar code's;
// round-half-away-from-zero is the truncation plus one step away where the remainder is at
// least one half (the remainder is exact); the conversion and clamp are the scalar code's (a NaN
// converts to INT_MIN and clamps to -127 either way).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/ops.h"

namespace walsh {
namespace {

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline int32_t HorizontalSum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// round-half-away(y), converted and clamped to [-127, 127].
inline __m256i RoundClamp(__m256 y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(y, t));
  const __m256 away = _mm256_or_ps(_mm256_and_ps(y, sign), _mm256_set1_ps(1.0f));
  const __m256 step = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), away);
  const __m256i v = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
  return _mm256_max_epi32(_mm256_min_epi32(v, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
}

struct Positions {
  uint8_t element[3][128];  // element at position i, per layout
  Positions() {
    for (int l = 0; l < 3; ++l) {
      for (int i = 0; i < 128; ++i) element[l][i] = Q8ElementAt(static_cast<Q8Layout>(l), i);
    }
  }
};

}  // namespace

void QuantizeRowQ8Avx2(const float* x, int64_t n, Q8Layout layout, Q8Block128* out) {
  static const Positions positions;
  const uint8_t* element = positions.element[static_cast<int>(layout)];
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < n / 128; ++b) {
    const float* xb = x + b * 128;
    Q8Block128* o = out + b;
    alignas(32) int8_t q[128];
    for (int s = 0; s < 4; ++s) {
      __m256 amax = _mm256_setzero_ps();  // max_ps(v, amax) keeps amax where v is NaN
      for (int j = 0; j < 32; j += 8) {
        amax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xb + 32 * s + j), abs_mask), amax);
      }
      const float d = HorizontalMax(amax) / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const float d16 = Fp16ToFloat(FloatToFp16(d));
      const __m256 id8 = _mm256_set1_ps(id);
      __m256i v[4];
      for (int j = 0; j < 4; ++j) {
        v[j] = RoundClamp(_mm256_mul_ps(_mm256_loadu_ps(xb + 32 * s + 8 * j), id8));
      }
      for (int h = 0; h < 2; ++h) {
        const int g = 2 * s + h;
        o->d[Q8GroupLane(layout, g)] = d16;
        o->minus_sum[Q8GroupLane(layout, g)] =
            -HorizontalSum(_mm256_add_epi32(v[2 * h], v[2 * h + 1]));
      }
      // int32 -> int8 in order: packs interleave 128-bit halves, the permute undoes it.
      const __m256i w16 = _mm256_packs_epi32(v[0], v[1]), x16 = _mm256_packs_epi32(v[2], v[3]);
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w16, x16),
                                                        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * s), bytes);
    }
    if (layout == Q8Layout::kNatural) {
      std::memcpy(o->qs, q, 128);
    } else {
      for (int i = 0; i < 128; ++i) o->qs[i] = q[element[i]];
    }
  }
}

}  // namespace walsh
