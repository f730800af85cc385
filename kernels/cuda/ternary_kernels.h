// CUDA kernels of the ternary forward pass (sm_90), with the CPU backend's op signatures in
// device memory: raw pointers and a stream in, a CUDA error code out (0 = success). Numerics
// follow kernels/cpu: the signed FWHT and the int8 activation quantization are bit-identical
// to the CPU (same float operations in the same order, no fused multiply-adds); the mat-vec's
// integer parts are exact and its float sum over blocks is reduced across a warp, so it matches
// the CPU within float rounding, not bit for bit.
#ifndef WALSH_KERNELS_CUDA_TERNARY_KERNELS_H_
#define WALSH_KERNELS_CUDA_TERNARY_KERNELS_H_

#include <cstdint>

#include "kernels/q8_activation.h"

typedef struct CUstream_st* cudaStream_t;

namespace walsh::cuda {

// out[t] = T(s ⊙ x[t]) for n_tokens rows of n values; block: a power of two up to 1024.
int SignedFwhtForward(const float* x, const int8_t* signs, int64_t n_tokens, int64_t n,
                      int64_t block, float* out, cudaStream_t stream);

// Quantizes n_tokens rows of n values (a multiple of 128) into Q8 blocks in `layout`.
int QuantizeRowsQ8(const float* x, int64_t n_tokens, int64_t n, Q8Layout layout, Q8Block128* out,
                   cudaStream_t stream);

// y[r] = Σ_b dw_b ((p0 + p1) + (p2 + p3)) for rows r of a PQ2_0 (142) or PTQ1_0 (143) matrix
// and one token of quantized activations.
int TernaryMatVecQ8(uint32_t ggml_type, const uint8_t* weights, int64_t rows, int64_t cols,
                    const Q8Block128* x, float* y, cudaStream_t stream);

}  // namespace walsh::cuda

#endif  // WALSH_KERNELS_CUDA_TERNARY_KERNELS_H_
