// Fast signed blocked Walsh-Hadamard transform. Same butterflies in the same stage order as
// kernels/hadamard_ref.h, so results are bit-identical to the reference on every path.
#ifndef WALSH_KERNELS_CPU_HADAMARD_H_
#define WALSH_KERNELS_CPU_HADAMARD_H_

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace walsh {

// out = T_n(s ⊙ x); signs may be null (identity). `out` may alias `x`.
void SignedFwhtForward(CpuIsa isa, const float* x, const int8_t* signs, int64_t n, int64_t block,
                       float* out);
// out = s ⊙ T_n(x). `out` may alias `x`.
void SignedFwhtInverse(CpuIsa isa, const float* x, const int8_t* signs, int64_t n, int64_t block,
                       float* out);

// In-place normalized WHT of every block of `n` values (AVX2; block >= 8).
void FwhtBlocksAvx2(float* v, int64_t n, int64_t block);

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_HADAMARD_H_
