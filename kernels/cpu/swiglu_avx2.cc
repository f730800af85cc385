// SwiGLU with AVX2, bit for bit with the shared silu(g) · u (kernels/numerics.h), its ExpF eight
// lanes at a time (exp_avx2.h).
#include <immintrin.h>

#include "kernels/cpu/exp_avx2.h"
#include "kernels/cpu/ops.h"

namespace walsh {

void SwiGluAvx2(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, Exp8(_mm256_xor_ps(g, sign))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  SwiGlu(gate + i, up + i, n - i, out + i);
}

}  // namespace walsh
