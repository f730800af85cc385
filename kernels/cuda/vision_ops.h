// The CUDA kernels of the vision encoder (docs/vision.md §3), as host launchers in the manner of
// ops.h: device pointers, sizes and a stream in, a CUDA error code out (0 = success). The float
// ops are kernels/vision_numerics.h's and kernels/token_ops.h's, split across threads only where
// the pieces are independent, so every result is the CPU encoder's bit for bit. Built with
// --fmad=false.
#ifndef WALSH_KERNELS_CUDA_VISION_OPS_H_
#define WALSH_KERNELS_CUDA_VISION_OPS_H_

#include <stdint.h>

typedef struct CUstream_st* cudaStream_t;

namespace walsh::cuda {

// y[i][o] = b[o] + Σ_k w[o][k] · x[i][k] for n rows of `in` values and `out` outputs, w row-major
// (out × in); each output's terms in the 8 lanes of kernels/vision_numerics.h.
int F32Linear(const float* x, int64_t n, int64_t in, const float* w, const float* b, int64_t out,
              float* y, cudaStream_t stream);

// y[i] = LayerNorm of x[i] (n rows of d) with weight w and bias b.
int LayerNormRows(const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps,
                  float* y, cudaStream_t stream);

enum class Gelu { kTanh, kErf };
int GeluInPlace(float* x, int64_t count, Gelu form, cudaStream_t stream);

// x[s] += Σ_tap weight[s][tap] · table[table_row[s][tap]], the 4 taps in order (d values a row).
int AddPositionTaps(float* x, int64_t n, int64_t d, const float* table, const int32_t* table_row,
                    const float* weight, cudaStream_t stream);

// Every head of q and k turned in place: qkv holds n rows of [Q | K | V], each d = heads · hd
// wide; cos and sin hold hd / 2 values per row.
int Rope2dInPlace(float* qkv, int64_t n, int64_t d, int64_t heads, const float* cos,
                  const float* sin, cudaStream_t stream);

// Queries [q_begin, q_end) of every head over all n keys (no mask), from the same qkv rows:
// out[q][h · hd ..] = kernels/token_ops.h's AttendOneHead. `scores` holds
// (q_end - q_begin) · heads · n floats; `zero_page` one device int32 of value 0 (the keys are one
// page, in place in qkv).
int FullAttention(const float* qkv, int64_t n, int64_t d, int64_t heads, int64_t q_begin,
                  int64_t q_end, float scale, const int32_t* zero_page, float* scores, float* out,
                  cudaStream_t stream);

}  // namespace walsh::cuda

#endif  // WALSH_KERNELS_CUDA_VISION_OPS_H_
