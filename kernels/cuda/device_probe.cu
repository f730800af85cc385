#include <cuda_runtime.h>

#include "kernels/cuda/device_probe.h"

namespace walsh::cuda {
namespace {

__global__ void SaxpyKernel(float a, const float* x, const float* y, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}

// Frees its device buffer on every path.
struct DeviceBuffer {
  float* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

}  // namespace

int CountDevices(int* count) {
  *count = 0;
  const cudaError_t err = cudaGetDeviceCount(count);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
    *count = 0;
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return static_cast<int>(err);
}

int SaxpyOnDevice(int device, float a, const float* x, const float* y, float* out, int64_t n) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return err;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  DeviceBuffer dx, dy, dout;
  if ((err = cudaMalloc(&dx.ptr, bytes)) != cudaSuccess) return err;
  if ((err = cudaMalloc(&dy.ptr, bytes)) != cudaSuccess) return err;
  if ((err = cudaMalloc(&dout.ptr, bytes)) != cudaSuccess) return err;
  if ((err = cudaMemcpy(dx.ptr, x, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) return err;
  if ((err = cudaMemcpy(dy.ptr, y, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) return err;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  SaxpyKernel<<<static_cast<unsigned>(blocks), threads>>>(a, dx.ptr, dy.ptr, dout.ptr, n);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  return cudaMemcpy(out, dout.ptr, bytes, cudaMemcpyDeviceToHost);
}

const char* ErrorString(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // namespace walsh::cuda
