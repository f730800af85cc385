// Loads of read-only data through the non-coherent cache (ld.global.nc), 4, 8 and 16 bytes wide
// (the address aligned to the width), and the pieces of what they load. Included by .cu files
// only.
#ifndef WALSH_KERNELS_CUDA_READ_ONLY_LOADS_H_
#define WALSH_KERNELS_CUDA_READ_ONLY_LOADS_H_

#include <cuda_runtime.h>
#include <stdint.h>

namespace walsh::cuda {

__device__ __forceinline__ uint32_t Load4(const void* p) {
  return __ldg(reinterpret_cast<const uint32_t*>(p));
}
__device__ __forceinline__ uint2 Load8(const void* p) {
  return __ldg(reinterpret_cast<const uint2*>(p));
}
__device__ __forceinline__ uint4 Load16(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// 32-bit word j (0..3) of a 16-byte load.
__device__ __forceinline__ uint32_t Word(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}
// The 16-bit value j (0..3) of four packed in an 8-byte load.
__device__ __forceinline__ uint32_t Half(const uint2& v, int j) {
  return ((j < 2 ? v.x : v.y) >> (16 * (j & 1))) & 0xffffu;
}

}  // namespace walsh::cuda

#endif  // WALSH_KERNELS_CUDA_READ_ONLY_LOADS_H_
