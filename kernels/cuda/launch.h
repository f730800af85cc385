// What every launcher shares: grid sizes and the error of the last launch.
#ifndef WALSH_KERNELS_CUDA_LAUNCH_H_
#define WALSH_KERNELS_CUDA_LAUNCH_H_

#include <cuda_runtime.h>
#include <stdint.h>

namespace walsh::cuda {

inline unsigned GridFor(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

inline int LastLaunchError() { return static_cast<int>(cudaGetLastError()); }

}  // namespace walsh::cuda

#endif  // WALSH_KERNELS_CUDA_LAUNCH_H_
