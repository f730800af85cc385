// The signed blocked FWHT (docs/format.md §7) and the int8 activation quantization.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"

namespace walsh::cuda {
namespace {

// One thread block per (row, rotation block), the block in shared memory. Stage h pairs
// (j, j + h) as a + b, a - b exactly as kernels/hadamard_ref.cc, then one multiply.
__global__ void FwhtKernel(const float* x, int64_t width, int block, const int8_t* signs_before,
                           const int8_t* signs_after, Permutation perm, float scale, float* out) {
  extern __shared__ float v[];
  const int64_t row = blockIdx.y;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * block;
  const float* xr = x + row * width;
  for (int j = threadIdx.x; j < block; j += blockDim.x) {
    const int64_t e = col0 + j;
    int64_t src = e;
    if (perm.n_k > 0) {  // grouped position e reads tiled position (r · n_k + k) · hd + d
      const int64_t d = e % perm.hd, r = (e / perm.hd) % perm.rep, k = e / (perm.hd * perm.rep);
      src = (r * perm.n_k + k) * perm.hd + d;
    }
    const float xv = xr[src];
    v[j] = signs_before != nullptr && signs_before[e] < 0 ? -xv : xv;
  }
  __syncthreads();
  for (int h = 1; h < block; h *= 2) {
    for (int p = threadIdx.x; p < block / 2; p += blockDim.x) {
      const int i = (p / h) * 2 * h + (p % h);
      const float a = v[i], b = v[i + h];
      v[i] = a + b;
      v[i + h] = a - b;
    }
    __syncthreads();
  }
  for (int j = threadIdx.x; j < block; j += blockDim.x) {
    const float r = v[j] * scale;
    out[row * width + col0 + j] = signs_after != nullptr && signs_after[col0 + j] < 0 ? -r : r;
  }
}

// One thread per 128-value block.
__global__ void QuantizeKernel(const float* x, int64_t blocks, Q8Layout layout, Q8Block128* out) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  QuantizeBlockQ8(x + b * 128, layout, out + b);
}

}  // namespace

int SignedFwht(const float* x, int64_t rows, int64_t width, int64_t block,
               const int8_t* signs_before, const int8_t* signs_after, Permutation permute,
               float* out, cudaStream_t stream) {
  if (block < 2 || block > 1024 || (block & (block - 1)) != 0 || width % block != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (rows == 0) return 0;
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(block)));
  const dim3 grid(static_cast<unsigned>(width / block), static_cast<unsigned>(rows));
  const unsigned threads = static_cast<unsigned>(block / 2 < 32 ? 32 : block / 2);
  FwhtKernel<<<grid, threads, block * sizeof(float), stream>>>(
      x, width, static_cast<int>(block), signs_before, signs_after, permute, scale, out);
  return LastLaunchError();
}

int QuantizeRowsQ8(const float* x, int64_t rows, int64_t width, Q8Layout layout, Q8Block128* out,
                   cudaStream_t stream) {
  if (width % 128 != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t blocks = rows * (width / 128);  // the kernel bounds-checks the last grid block
  if (blocks == 0) return 0;
  QuantizeKernel<<<GridFor(blocks, 128), 128, 0, stream>>>(x, blocks, layout, out);
  return LastLaunchError();
}

}  // namespace walsh::cuda
