// The 32 sum lanes of kernels/token_ops.h (kSumLanes) across one warp: lane l of the warp holds
// lane l's sum, and the halving p[l] = p[l] + p[l + s] (s = 16 .. 1) runs as shuffles down, so
// lane 0 ends with the bits CombineLanes gives on the host; and the attention kernels' softmax
// on it. Included by .cu files only.
#ifndef WALSH_KERNELS_CUDA_WARP_LANES_H_
#define WALSH_KERNELS_CUDA_WARP_LANES_H_

#include <cuda_runtime.h>

#include "kernels/token_ops.h"

namespace walsh::cuda {

static_assert(kSumLanes == 32, "one sum lane per thread of a warp");
inline constexpr unsigned kFullWarp = 0xffffffffu;

// The combined sum, in every lane.
template <typename T>
__device__ inline T WarpCombineLanes(T lane_sum) {
  for (int s = kSumLanes / 2; s > 0; s /= 2) {
    lane_sum = lane_sum + __shfl_down_sync(kFullWarp, lane_sum, s);
  }
  return __shfl_sync(kFullWarp, lane_sum, 0);
}

// MaxF over the warp's values (any order gives the same maximum, up to the sign of a zero,
// which no later step can see: x - (+0) and x - (-0) are equal for every x but a zero, and
// e^(±0) = 1).
__device__ inline float WarpMax(float v) {
  for (int s = kSumLanes / 2; s > 0; s /= 2) v = MaxF(v, __shfl_down_sync(kFullWarp, v, s));
  return __shfl_sync(kFullWarp, v, 0);
}

// One thread block's softmax over the scores [0, n) its threads have just written: leaves
// e^(s - max) in scores and returns their 32-lane sum (SoftmaxNumerators of kernels/token_ops.h,
// the maximum and the sum each in the block's first warp), in every thread. Every thread of the
// block must call it.
__device__ inline float BlockSoftmaxNumerators(float* scores, int64_t n) {
  __shared__ float max_score, sum;
  __syncthreads();
  if (threadIdx.x < kSumLanes) {
    float m = BitsFloat(0xff800000u);
    for (int64_t key = threadIdx.x; key < n; key += kSumLanes) m = MaxF(m, scores[key]);
    m = WarpMax(m);
    if (threadIdx.x == 0) max_score = m;
  }
  __syncthreads();
  for (int64_t key = threadIdx.x; key < n; key += blockDim.x) {
    scores[key] = ExpF(scores[key] - max_score);
  }
  __syncthreads();
  if (threadIdx.x < kSumLanes) {
    const float total = WarpCombineLanes(SumLane(scores, n, static_cast<int>(threadIdx.x)));
    if (threadIdx.x == 0) sum = total;
  }
  __syncthreads();
  return sum;
}

}  // namespace walsh::cuda

#endif  // WALSH_KERNELS_CUDA_WARP_LANES_H_
