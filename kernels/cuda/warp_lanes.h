// The 32 sum lanes of kernels/token_ops.h (kSumLanes) across one warp: lane l of the warp holds
// lane l's sum, and the halving p[l] = p[l] + p[l + s] (s = 16 .. 1) runs as shuffles down, so
// lane 0 ends with the bits CombineLanes gives on the host. Included by .cu files only.
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

}  // namespace walsh::cuda

#endif  // WALSH_KERNELS_CUDA_WARP_LANES_H_
