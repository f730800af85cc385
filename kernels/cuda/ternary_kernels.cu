#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/block_types.h"
#include "kernels/cuda/ternary_kernels.h"

namespace walsh::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// Signed FWHT: one thread block per (token, rotation block), the block in shared memory; stage
// h pairs (j, j + h) as a + b, a - b exactly as the CPU reference, then one multiply.

__global__ void FwhtKernel(const float* x, const int8_t* signs, int64_t n, int block, float scale,
                           float* out) {
  extern __shared__ float v[];
  const int64_t base =
      static_cast<int64_t>(blockIdx.y) * n + static_cast<int64_t>(blockIdx.x) * block;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * block;
  for (int j = threadIdx.x; j < block; j += blockDim.x) {
    const float xv = x[base + j];
    v[j] = signs != nullptr && signs[col0 + j] < 0 ? -xv : xv;
  }
  __syncthreads();
  for (int h = 1; h < block; h *= 2) {
    for (int p = threadIdx.x; p < block / 2; p += blockDim.x) {
      const int i = (p / h) * 2 * h + (p % h);
      const float a = v[i], b = v[i + h];
      v[i] = __fadd_rn(a, b);
      v[i + h] = __fsub_rn(a, b);
    }
    __syncthreads();
  }
  for (int j = threadIdx.x; j < block; j += blockDim.x) out[base + j] = __fmul_rn(v[j], scale);
}

// ---------------------------------------------------------------------------------------------
// Q8 quantization: one warp per 32-value sub-block (Q8_0 numerics, as kernels/q8_activation.cc).

__global__ void QuantizeKernel(const float* x, int64_t n, Q8Layout layout, Q8Block128* out) {
  const int64_t sub = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t subs_per_row = n / 32;
  const int64_t token = sub / subs_per_row, s_in_row = sub % subs_per_row;
  const float xv = x[token * n + s_in_row * 32 + lane];
  float amax = fabsf(xv);
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  int q = static_cast<int>(roundf(__fmul_rn(xv, id)));
  q = max(-127, min(127, q));
  int sum = q;
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  Q8Block128& blk = out[token * (n / 128) + s_in_row / 4];
  const int s = static_cast<int>(s_in_row % 4);
  const int element = s * 32 + lane;
  const int pos = layout == Q8Layout::kNatural ? element : (element & 3) * 32 + (element >> 2);
  blk.qs[pos] = static_cast<int8_t>(q);
  if (lane == 0) {
    blk.d[s] = __half2float(__float2half_rn(d));
    blk.sum[s] = sum;
  }
}

// ---------------------------------------------------------------------------------------------
// Mat-vec: one warp per row; lane l takes blocks l, l + 32, ...; integer dot products with
// dp4a, the block's float combine as on the CPU, then a warp sum.

__device__ __forceinline__ float Combine(const int32_t isum[4], const Q8Block128& xb) {
  const float p0 = __fmul_rn(static_cast<float>(isum[0] - xb.sum[0]), xb.d[0]);
  const float p1 = __fmul_rn(static_cast<float>(isum[1] - xb.sum[1]), xb.d[1]);
  const float p2 = __fmul_rn(static_cast<float>(isum[2] - xb.sum[2]), xb.d[2]);
  const float p3 = __fmul_rn(static_cast<float>(isum[3] - xb.sum[3]), xb.d[3]);
  return __fadd_rn(__fadd_rn(p0, p1), __fadd_rn(p2, p3));
}

__global__ void MatVecPq2Kernel(const block_pq2_0* w, int64_t rows, int64_t nb, const Q8Block128* x,
                                float* y) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float acc = 0.0f;
  for (int64_t b = lane; b < nb; b += 32) {
    const block_pq2_0& blk = w[row * nb + b];
    const Q8Block128& xb = x[b];
    uint32_t qs[8];
    for (int i = 0; i < 8; ++i) {
      qs[i] = static_cast<uint32_t>(blk.qs[4 * i]) | static_cast<uint32_t>(blk.qs[4 * i + 1]) << 8 |
              static_cast<uint32_t>(blk.qs[4 * i + 2]) << 16 |
              static_cast<uint32_t>(blk.qs[4 * i + 3]) << 24;
    }
    const int* xq = reinterpret_cast<const int*>(xb.qs);
    int32_t isum[4] = {0, 0, 0, 0};
    for (int p = 0; p < 4; ++p) {
      for (int i = 0; i < 8; ++i) {  // word i of plane p: positions m = 4i..4i+3, sub-block i/2
        const int codes = static_cast<int>((qs[i] >> (2 * p)) & 0x03030303u);
        isum[i / 2] = __dp4a(codes, xq[p * 8 + i], isum[i / 2]);
      }
    }
    acc = __fadd_rn(acc, __fmul_rn(__half2float(__ushort_as_half(blk.d)), Combine(isum, xb)));
  }
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) y[row] = acc;
}

__device__ __forceinline__ int Trit(uint8_t b, int n) {
  const int pow3[5] = {1, 3, 9, 27, 81};
  const uint8_t p = static_cast<uint8_t>(b * pow3[n]);
  return (static_cast<int>(p) * 3) >> 8;
}

__global__ void MatVecPtq1Kernel(const block_ptq1_0* w, int64_t rows, int64_t nb,
                                 const Q8Block128* x, float* y) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float acc = 0.0f;
  for (int64_t b = lane; b < nb; b += 32) {
    const block_ptq1_0& blk = w[row * nb + b];
    const Q8Block128& xb = x[b];
    int32_t isum[4] = {0, 0, 0, 0};
    for (int m = 0; m < 24; ++m) {
      for (int n = 0; n < 5; ++n) {
        const int e = m < 16 ? n * 16 + m : 80 + n * 8 + (m - 16);
        isum[e / 32] += Trit(blk.qs[m], n) * xb.qs[e];
      }
    }
    for (int j = 0; j < 2; ++j) {
      for (int n = 0; n < 4; ++n) {
        const int e = 120 + n * 2 + j;
        isum[e / 32] += Trit(blk.qh[j], n) * xb.qs[e];
      }
    }
    acc = __fadd_rn(acc, __fmul_rn(__half2float(__ushort_as_half(blk.d)), Combine(isum, xb)));
  }
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) y[row] = acc;
}

}  // namespace

int SignedFwhtForward(const float* x, const int8_t* signs, int64_t n_tokens, int64_t n,
                      int64_t block, float* out, cudaStream_t stream) {
  if (block < 2 || block > 1024 || n % block != 0) return static_cast<int>(cudaErrorInvalidValue);
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(block)));
  const dim3 grid(static_cast<unsigned>(n / block), static_cast<unsigned>(n_tokens));
  FwhtKernel<<<grid, static_cast<unsigned>(block / 2 < 32 ? 32 : block / 2), block * sizeof(float),
               stream>>>(x, signs, n, static_cast<int>(block), scale, out);
  return static_cast<int>(cudaGetLastError());
}

int QuantizeRowsQ8(const float* x, int64_t n_tokens, int64_t n, Q8Layout layout, Q8Block128* out,
                   cudaStream_t stream) {
  if (n % 128 != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t threads = n_tokens * n;  // one per value; 32 per sub-block
  QuantizeKernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(x, n, layout,
                                                                                   out);
  return static_cast<int>(cudaGetLastError());
}

int TernaryMatVecQ8(uint32_t ggml_type, const uint8_t* weights, int64_t rows, int64_t cols,
                    const Q8Block128* x, float* y, cudaStream_t stream) {
  if (cols % 128 != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t nb = cols / 128;
  const unsigned grid = static_cast<unsigned>((rows * 32 + 255) / 256);
  if (ggml_type == 142) {
    MatVecPq2Kernel<<<grid, 256, 0, stream>>>(reinterpret_cast<const block_pq2_0*>(weights), rows,
                                              nb, x, y);
  } else {
    MatVecPtq1Kernel<<<grid, 256, 0, stream>>>(reinterpret_cast<const block_ptq1_0*>(weights), rows,
                                               nb, x, y);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace walsh::cuda
