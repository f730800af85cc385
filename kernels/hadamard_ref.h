// Reference signed blocked Walsh-Hadamard transform of the prism.hadamard contract
// (docs/format.md §7). Scalar and plain on purpose: fast paths must match it bit for bit.
#ifndef WALSH_KERNELS_HADAMARD_REF_H_
#define WALSH_KERNELS_HADAMARD_REF_H_

#include <cstdint>

namespace walsh {

// Normalized Sylvester WHT of one block of `block` (a power of two) values, in place:
// the in-place butterfly for h = 1, 2, 4, ... then one multiply by 1/sqrt(block).
void FwhtBlockRef(float* v, int64_t block);

// Forward activation transform: out = T_n(s ⊙ x). `signs` holds n values of ±1, or is
// null for sign_mode identity. `n` is a multiple of `block`. `out` may alias `x`.
void SignedFwhtForwardRef(const float* x, const int8_t* signs, int64_t n, int64_t block,
                          float* out);

// Inverse (embedding rows): out = s ⊙ T_n(x). `out` may alias `x`.
void SignedFwhtInverseRef(const float* x, const int8_t* signs, int64_t n, int64_t block,
                          float* out);

// GDN value-head permutation from tiled to grouped order (docs/format.md §7.3):
// out[(k*rep + r)*hd + d] = in[(r*n_k + k)*hd + d]. `out` must not alias `in`.
void GdnPermuteRef(const float* in, int64_t n_k, int64_t rep, int64_t hd, float* out);

// The inverse of GdnPermuteRef (grouped to tiled order).
void GdnUnpermuteRef(const float* in, int64_t n_k, int64_t rep, int64_t hd, float* out);

}  // namespace walsh

#endif  // WALSH_KERNELS_HADAMARD_REF_H_
