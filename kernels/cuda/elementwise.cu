// Embedding rows (and the image rows that replace some), RMSNorm, residual adds, SwiGLU, row
// gathers and the small dense projections.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/warp_lanes.h"
#include "kernels/ternary_block_decode.h"
#include "kernels/ternary_lanes_layout.h"

namespace walsh::cuda {
namespace {

__global__ void EmbedKernel(TernaryWeights table, int64_t row_bytes, const int32_t* tokens,
                            float* out) {
  const int64_t t = blockIdx.y, cols = table.cols;
  const uint8_t* row = table.data + static_cast<int64_t>(tokens[t]) * row_bytes;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < cols;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / 128;
    const int j = static_cast<int>(i % 128);
    out[t * cols + i] = table.layout == TernaryLayout::kLanes
                            ? DequantizeTernaryLanes(table.format, row, cols / 128, b, j)
                            : DequantizeTernary(table.format, row, b, j);
  }
}

// One block per row: warp 0 sums the squares in kernels/token_ops.h's 32-lane order (lane l
// over i ≡ l mod 32, then halving), every thread scales its elements.
__global__ void RmsNormKernel(const float* x, int64_t cols, const float* w, float eps, float* out) {
  __shared__ float scale;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  if (threadIdx.x < 32) {
    double p = SumSquaresLane(xr, cols, static_cast<int>(threadIdx.x));
    for (int s = kNormLanes / 2; s > 0; s /= 2) p = p + __shfl_down_sync(0xffffffffu, p, s);
    if (threadIdx.x == 0) scale = RmsScaleFromSum(p, cols, eps);
  }
  __syncthreads();
  float* o = out + static_cast<int64_t>(blockIdx.x) * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = (xr[i] * scale) * w[i];
}

__global__ void AddKernel(float* acc, const float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += x[i];
}

__global__ void SwiGluKernel(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = Silu(gate[i]) * up[i];
}

__global__ void ReplaceRowsKernel(float* out, int64_t cols, const int32_t* row_of_token,
                                  const float* rows) {
  const int64_t t = blockIdx.y;
  const int32_t row = row_of_token[t];
  if (row < 0) return;
  const float* src = rows + static_cast<int64_t>(row) * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < cols;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[t * cols + i] = src[i];
  }
}

__global__ void GatherKernel(const float* x, int64_t cols, const int32_t* rows, float* out) {
  const int64_t r = blockIdx.y;
  const float* src = x + static_cast<int64_t>(rows[r]) * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < cols;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[r * cols + i] = src[i];
  }
}

__global__ void DenseKernel(DenseFormat format, const void* w, int64_t cols,
                            const int32_t* row_index, int64_t row_first, int64_t rows,
                            const float* x, int64_t n_tokens, float* y, int64_t y_stride,
                            int64_t col_offset) {
  // One warp per (token, row): lane l sums the row's lane l (the shared 32-lane order).
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kSumLanes;
  const int lane = static_cast<int>(threadIdx.x % kSumLanes);
  if (i >= rows * n_tokens) return;  // whole warps leave together: blockDim is a multiple of 32
  const int64_t t = i / rows, local = i % rows;
  const int64_t r = row_index != nullptr ? row_index[local] : row_first + local;
  const float dot = WarpCombineLanes(DenseRowDotLane(format, w, r, cols, x + t * cols, lane));
  if (lane == 0) y[t * y_stride + col_offset + local] = dot;
}

__global__ void TreeSumKernel(Leaves leaves, int n_leaves, int64_t count, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  float level[8];
  for (int l = 0; l < n_leaves; ++l) level[l] = leaves.leaf[l][i];
  for (int width = n_leaves; width > 1; width /= 2) {
    for (int l = 0; l < width / 2; ++l) level[l] = level[2 * l] + level[2 * l + 1];
  }
  out[i] = level[0];
}

__global__ void UngroupKernel(const float* x, int64_t n_k, int64_t rep, int64_t hd, float* out) {
  const int64_t width = n_k * rep * hd;
  const float* in = x + static_cast<int64_t>(blockIdx.y) * width;
  float* o = out + static_cast<int64_t>(blockIdx.y) * width;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < width;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = e % hd, r = (e / hd) % rep, k = e / (hd * rep);  // grouped (k·rep + r)
    o[(r * n_k + k) * hd + d] = in[e];
  }
}

}  // namespace

int EmbedRows(const TernaryWeights& table, const int32_t* tokens, int64_t n_tokens, float* out,
              cudaStream_t stream) {
  const int64_t cols = table.cols;
  if (cols % 128 != 0 || (table.layout == TernaryLayout::kLanes && !LanesLayoutFits(cols))) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (n_tokens == 0) return 0;
  const dim3 grid(GridFor(cols, 256) < 16 ? GridFor(cols, 256) : 16,
                  static_cast<unsigned>(n_tokens));
  EmbedKernel<<<grid, 256, 0, stream>>>(table, table.row_bytes(), tokens, out);
  return LastLaunchError();
}

int RmsNormRows(const float* x, int64_t rows, int64_t cols, const float* weight, float eps,
                float* out, cudaStream_t stream) {
  if (rows == 0) return 0;
  RmsNormKernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, cols, weight, eps, out);
  return LastLaunchError();
}

int AddInPlace(float* acc, const float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return 0;
  AddKernel<<<GridFor(n, 256), 256, 0, stream>>>(acc, x, n);
  return LastLaunchError();
}

int SwiGlu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return 0;
  SwiGluKernel<<<GridFor(n, 256), 256, 0, stream>>>(gate, up, n, out);
  return LastLaunchError();
}

int ReplaceRows(float* out, int64_t cols, const int32_t* row_of_token, int64_t n_tokens,
                const float* rows, cudaStream_t stream) {
  if (n_tokens == 0) return 0;
  const dim3 grid(GridFor(cols, 256) < 16 ? GridFor(cols, 256) : 16,
                  static_cast<unsigned>(n_tokens));
  ReplaceRowsKernel<<<grid, 256, 0, stream>>>(out, cols, row_of_token, rows);
  return LastLaunchError();
}

int GatherRows(const float* x, int64_t cols, const int32_t* rows, int64_t n, float* out,
               cudaStream_t stream) {
  if (n == 0) return 0;
  const dim3 grid(GridFor(cols, 256) < 16 ? GridFor(cols, 256) : 16, static_cast<unsigned>(n));
  GatherKernel<<<grid, 256, 0, stream>>>(x, cols, rows, out);
  return LastLaunchError();
}

int DenseProject(DenseFormat format, const void* w, int64_t cols, const int32_t* row_index,
                 int64_t row_first, int64_t rows, const float* x, int64_t n_tokens, float* y,
                 int64_t y_stride, int64_t col_offset, cudaStream_t stream) {
  if (rows * n_tokens == 0) return 0;
  DenseKernel<<<GridFor(rows * n_tokens * kSumLanes, 128), 128, 0, stream>>>(
      format, w, cols, row_index, row_first, rows, x, n_tokens, y, y_stride, col_offset);
  return LastLaunchError();
}

int TreeSum(Leaves leaves, int n_leaves, int64_t count, float* out, cudaStream_t stream) {
  if (n_leaves < 1 || n_leaves > 8 || (n_leaves & (n_leaves - 1)) != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (count == 0) return 0;
  TreeSumKernel<<<GridFor(count, 256), 256, 0, stream>>>(leaves, n_leaves, count, out);
  return LastLaunchError();
}

int Ungroup(const float* x, int64_t rows, int64_t n_k, int64_t rep, int64_t hd, float* out,
            cudaStream_t stream) {
  if (rows == 0) return 0;
  const int64_t width = n_k * rep * hd;
  const dim3 grid(GridFor(width, 256) < 16 ? GridFor(width, 256) : 16, static_cast<unsigned>(rows));
  UngroupKernel<<<grid, 256, 0, stream>>>(x, n_k, rep, hd, out);
  return LastLaunchError();
}

}  // namespace walsh::cuda
