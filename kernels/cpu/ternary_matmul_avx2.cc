// AVX2 ternary kernel: maddubs multiplies the unsigned codes by the int8 activations in pairs.
// Sums of at most 4 · 2 · 3 · 127 = 3048 cannot saturate int16, so the four code vectors add in
// int16 before one widening madd. The tiles and the float steps: ternary_kernel_x86.h.
#include <immintrin.h>

#include "kernels/cpu/ternary_kernel_x86.h"
#include "kernels/cpu/ternary_matmul.h"

namespace walsh {
namespace {

struct Avx2Dot {
  // Row and token tiles (ternary_kernel_x86.h), measured best here (bench/RESULTS.md).
  template <TernaryFormat F>
  static constexpr TileShape kTile = F == TernaryFormat::kPq2_0 ? TileShape{2, 4} : TileShape{1, 8};

  template <TernaryFormat F, int R, int T>
  using Accumulators = TokenAccumulators<Avx2Dot, R, T>;

  template <TernaryFormat F>
  [[gnu::always_inline]] static BlockCodes Decode(const uint8_t* row, int64_t b) {
    return DecodeBlock<F>(row, b);
  }

  // start + Σ code · q per group, in the format's lane order (kernels/q8_activation.h).
  static __m256i Sums(__m256i start, const BlockCodes& w, const int8_t* qs) {
    const auto* x = reinterpret_cast<const __m256i*>(qs);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i m0 = _mm256_maddubs_epi16(w.c[0], _mm256_load_si256(x + 0));
    const __m256i m1 = _mm256_maddubs_epi16(w.c[1], _mm256_load_si256(x + 1));
    const __m256i m2 = _mm256_maddubs_epi16(w.c[2], _mm256_load_si256(x + 2));
    const __m256i m3 = _mm256_maddubs_epi16(w.c[3], _mm256_load_si256(x + 3));
    const __m256i s16 = _mm256_add_epi16(_mm256_add_epi16(m0, m1), _mm256_add_epi16(m2, m3));
    return _mm256_add_epi32(start, _mm256_madd_epi16(s16, ones));
  }
};

}  // namespace

void TernaryMatMulQ8Avx2(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  MatMulAnyFormat<Avx2Dot>(p, row_begin, row_end);
}

}  // namespace walsh
