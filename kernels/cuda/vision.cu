// The vision encoder's kernels: its linear layers, LayerNorm, GELUs, position taps, 2D RoPE and
// full attention over an image's patches.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/vision_ops.h"
#include "kernels/cuda/warp_lanes.h"
#include "kernels/token_ops.h"
#include "kernels/vision_numerics.h"

namespace walsh::cuda {
namespace {

constexpr int kLinearRows = 8;      // rows of x per block: each thread's accumulators
constexpr int kLinearOutputs = 32;  // outputs per block, kF32MatMulLanes threads each
constexpr int kLinearThreads = kLinearOutputs * kF32MatMulLanes;
static_assert(32 % kF32MatMulLanes == 0, "an output's lanes lie in one warp");

// Thread t holds lane t % 8 of output o0 + t / 8 for kLinearRows rows, so a load of w serves
// every row; the 8 lanes of an output then meet in its first thread, which combines them in
// kernels/vision_numerics.h's order. Threads past the last row or output compute a clamped copy
// (every thread of a warp reaches the shuffles) and store nothing.
__global__ void __launch_bounds__(kLinearThreads)
    F32LinearKernel(const float* x, int64_t n, int64_t in, const float* w, const float* b,
                    int64_t out, float* y) {
  const int lane = static_cast<int>(threadIdx.x % kF32MatMulLanes);
  const int64_t o =
      static_cast<int64_t>(blockIdx.y) * kLinearOutputs + threadIdx.x / kF32MatMulLanes;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kLinearRows;
  const float* wr = w + (o < out ? o : out - 1) * in;
  const float* xr[kLinearRows];
  float acc[kLinearRows];
  for (int r = 0; r < kLinearRows; ++r) {
    xr[r] = x + (i0 + r < n ? i0 + r : n - 1) * in;
    acc[r] = 0.0f;
  }
  const int64_t whole = in / kF32MatMulLanes * kF32MatMulLanes;
  for (int64_t k = lane; k < whole; k += kF32MatMulLanes) {
    const float wk = wr[k];
    for (int r = 0; r < kLinearRows; ++r) acc[r] += xr[r][k] * wk;
  }
  if (whole + lane < in) {
    const float wk = wr[whole + lane];
    for (int r = 0; r < kLinearRows; ++r) acc[r] += xr[r][whole + lane] * wk;
  }
  const int first = static_cast<int>(threadIdx.x % 32) - lane;
  for (int r = 0; r < kLinearRows; ++r) {
    float lanes[kF32MatMulLanes];
    for (int l = 0; l < kF32MatMulLanes; ++l) lanes[l] = __shfl_sync(kFullWarp, acc[r], first + l);
    if (lane == 0 && o < out && i0 + r < n) {
      y[(i0 + r) * out + o] = CombineF32MatMulLanes(lanes) + b[o];
    }
  }
}

// One block per row: its first thread sums the mean and the variance in order, every thread
// writes its elements.
__global__ void LayerNormKernel(const float* x, int64_t d, const float* w, const float* b,
                                float eps, float* y) {
  __shared__ LayerNormStats stats;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * d;
  if (threadIdx.x == 0) stats = LayerNormRowStats(xr, d, eps);
  __syncthreads();
  float* yr = y + static_cast<int64_t>(blockIdx.x) * d;
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x)
    yr[k] = LayerNormValue(xr[k], stats, w[k], b[k]);
}

__global__ void GeluKernel(float* x, int64_t count, Gelu form) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] = form == Gelu::kTanh ? GeluTanh(x[i]) : GeluErf(x[i]);
}

// Row blockIdx.x (up to 2^31 - 1 of them), elements along y.
__global__ void PositionTapsKernel(float* x, int64_t d, const float* table,
                                   const int32_t* table_row, const float* weight) {
  const int64_t s = blockIdx.x;
  const int64_t e = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (e >= d) return;
  float v = x[s * d + e];
  for (int tap = 0; tap < kPositionTaps; ++tap) {
    const int64_t at = s * kPositionTaps + tap;
    v += weight[at] * table[static_cast<int64_t>(table_row[at]) * d + e];
  }
  x[s * d + e] = v;
}

// One thread per (row, head, q or k).
__global__ void Rope2dKernel(float* qkv, int64_t n, int64_t d, int64_t heads, const float* cos,
                             const float* sin) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * heads * 2) return;
  const int64_t s = i / (heads * 2), h = i / 2 % heads, which = i % 2;
  const int64_t hd = d / heads, half = hd / 2;
  Rope2dHead(qkv + s * 3 * d + which * d + h * hd, cos + s * half, sin + s * half, half);
}

// One block per (query, head), as the text model's attention kernel (attention.cu) without its
// gate: scores a key per thread, the maximum and the 32-lane sum in the first warp, then each
// output element over the keys in order.
__global__ void FullAttentionKernel(const float* qkv, int64_t n, int64_t d, int64_t heads,
                                    int64_t q_begin, float scale, const int32_t* zero_page,
                                    float* scores_all, float* out) {
  const int64_t q = q_begin + blockIdx.x / heads, h = blockIdx.x % heads, hd = d / heads;
  const PagedKv<float> kv{qkv + d, qkv + 2 * d, zero_page, 0, n, 3 * d, h * hd};
  const float* qv = qkv + q * 3 * d + h * hd;
  float* scores = scores_all + static_cast<int64_t>(blockIdx.x) * n;
  for (int64_t key = threadIdx.x; key < n; key += blockDim.x) {
    scores[key] = AttentionScore(qv, hd, kv, key, scale);
  }
  const float sum = BlockSoftmaxNumerators(scores, n);
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    out[q * d + h * hd + i] = AttentionOutput(scores, sum, kv, n, i);
  }
}

}  // namespace

int F32Linear(const float* x, int64_t n, int64_t in, const float* w, const float* b, int64_t out,
              float* y, cudaStream_t stream) {
  if (n <= 0 || out <= 0) return 0;
  const dim3 grid(GridFor(n, kLinearRows), GridFor(out, kLinearOutputs));
  F32LinearKernel<<<grid, kLinearThreads, 0, stream>>>(x, n, in, w, b, out, y);
  return LastLaunchError();
}

int LayerNormRows(const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps,
                  float* y, cudaStream_t stream) {
  if (n <= 0) return 0;
  LayerNormKernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(x, d, w, b, eps, y);
  return LastLaunchError();
}

int GeluInPlace(float* x, int64_t count, Gelu form, cudaStream_t stream) {
  if (count <= 0) return 0;
  GeluKernel<<<GridFor(count, 256), 256, 0, stream>>>(x, count, form);
  return LastLaunchError();
}

int AddPositionTaps(float* x, int64_t n, int64_t d, const float* table, const int32_t* table_row,
                    const float* weight, cudaStream_t stream) {
  if (n <= 0) return 0;
  const dim3 grid(static_cast<unsigned>(n), GridFor(d, 128));
  PositionTapsKernel<<<grid, 128, 0, stream>>>(x, d, table, table_row, weight);
  return LastLaunchError();
}

int Rope2dInPlace(float* qkv, int64_t n, int64_t d, int64_t heads, const float* cos,
                  const float* sin, cudaStream_t stream) {
  if (n <= 0) return 0;
  Rope2dKernel<<<GridFor(n * heads * 2, 128), 128, 0, stream>>>(qkv, n, d, heads, cos, sin);
  return LastLaunchError();
}

int FullAttention(const float* qkv, int64_t n, int64_t d, int64_t heads, int64_t q_begin,
                  int64_t q_end, float scale, const int32_t* zero_page, float* scores, float* out,
                  cudaStream_t stream) {
  if (q_end <= q_begin) return 0;
  FullAttentionKernel<<<static_cast<unsigned>((q_end - q_begin) * heads), 128, 0, stream>>>(
      qkv, n, d, heads, q_begin, scale, zero_page, scores, out);
  return LastLaunchError();
}

}  // namespace walsh::cuda
