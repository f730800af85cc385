// AVX-512 VNNI ternary kernel (on 256-bit registers, AVX512VL): vpdpbusd multiplies the
// unsigned codes by the int8 activations and adds four products to each int32 lane in one
// instruction, so the four code vectors chain into one accumulator with no int16 step. The
// tiles and the float steps are the AVX2 kernel's (ternary_kernel_x86.h), so the bits are too.
#include <immintrin.h>

#include "kernels/cpu/ternary_kernel_x86.h"
#include "kernels/cpu/ternary_matmul.h"

namespace walsh {
namespace {

struct VnniDot {
  // Row and token tiles (ternary_kernel_x86.h), measured best here (bench/RESULTS.md).
  template <TernaryFormat F>
  static constexpr TileShape kTile =
      F == TernaryFormat::kPq2_0 ? TileShape{2, 8} : TileShape{1, 16};

  static __m256i Sums(__m256i start, const BlockCodes& w, const int8_t* qs) {
    const auto* x = reinterpret_cast<const __m256i*>(qs);
    __m256i v = _mm256_dpbusd_epi32(start, w.c[0], _mm256_load_si256(x + 0));
    v = _mm256_dpbusd_epi32(v, w.c[1], _mm256_load_si256(x + 1));
    v = _mm256_dpbusd_epi32(v, w.c[2], _mm256_load_si256(x + 2));
    return _mm256_dpbusd_epi32(v, w.c[3], _mm256_load_si256(x + 3));
  }
};

}  // namespace

void TernaryMatMulQ8Avx512Vnni(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  MatMulAnyFormat<VnniDot>(p, row_begin, row_end);
}

}  // namespace walsh
