// WALSH_HD marks a function compiled for both the host and a CUDA device. The numerics every
// backend shares live in headers that use it (numerics.h, token_ops.h, vision_numerics.h, the
// ternary block decode and combine), so the CPU tests run the very code the GPU runs. Host and
// device builds both forbid contracted multiply-adds (-ffp-contract=off, nvcc --fmad=false), so
// each float operation rounds alike everywhere.
#ifndef WALSH_KERNELS_HOST_DEVICE_H_
#define WALSH_KERNELS_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define WALSH_HD __host__ __device__ __forceinline__
#else
#define WALSH_HD inline
#endif

#endif  // WALSH_KERNELS_HOST_DEVICE_H_
