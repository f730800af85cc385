// Device memory owned by RAII: one cudaMalloc'd allocation, freed on destruction. Never managed
// memory. Allocate() takes exactly what is asked (weights, caches); Reserve() grows a scratch
// buffer with headroom, replacing the allocation (contents are not kept) once the device is idle.
// And page-locked host memory, the same way (PinnedHostBuffer).
#ifndef WALSH_WORKER_ENGINE_CUDA_DEVICE_BUFFER_H_
#define WALSH_WORKER_ENGINE_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace walsh {

// An absl::Status for a CUDA error code, naming the operation; OK for cudaSuccess.
inline absl::Status CudaStatus(cudaError_t code, const std::string& op) {
  if (code == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("cuda ", op, ": ", cudaGetErrorName(code), ": ", cudaGetErrorString(code)));
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { Release(); }

  // At least `bytes` bytes; a smaller allocation is replaced by one 1.25× larger than asked.
  absl::Status Reserve(int64_t bytes, const std::string& what) {
    if (bytes <= bytes_) return absl::OkStatus();
    return Allocate(bytes + bytes / 4, what);
  }

  // Exactly `bytes` bytes, replacing any earlier allocation after the device has finished with
  // it.
  absl::Status Allocate(int64_t bytes, const std::string& what) {
    if (ptr_ != nullptr) {
      if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
        return CudaStatus(e, "synchronize before freeing " + what);
      }
      Release();
    }
    const int64_t want = bytes > 0 ? bytes : 1;
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, static_cast<size_t>(want)); e != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          "cuda: cannot allocate ", want, " bytes for ", what, ": ", cudaGetErrorString(e)));
    }
    ptr_ = p;
    bytes_ = want;
    return absl::OkStatus();
  }

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  void Release() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost), freed on destruction: the source of a step's one
// asynchronous upload. Reserve() keeps nothing of what it replaces.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer() { Release(); }

  // At least `bytes` bytes; the caller has waited for every copy that reads the old memory.
  absl::Status Reserve(int64_t bytes, const std::string& what) {
    if (bytes <= bytes_) return absl::OkStatus();
    Release();
    const int64_t want = bytes + bytes / 4;
    void* p = nullptr;
    if (cudaError_t e = cudaMallocHost(&p, static_cast<size_t>(want)); e != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          "cuda: cannot pin ", want, " host bytes for ", what, ": ", cudaGetErrorString(e)));
    }
    ptr_ = p;
    bytes_ = want;
    return absl::OkStatus();
  }

  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }
  int64_t bytes() const { return bytes_; }

 private:
  void Release() {
    if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_CUDA_DEVICE_BUFFER_H_
