// What one piece of device work owns for its duration, beside the long-lived allocations of
// cuda_device_buffer.h: the calling thread's current device, a stream of its own, and memory
// allocated and freed in that stream's order. Destroyed in reverse order of declaration, they
// free the memory in the stream's order, synchronize the stream, then restore the device.
#ifndef WALSH_WORKER_ENGINE_CUDA_STREAM_SCOPE_H_
#define WALSH_WORKER_ENGINE_CUDA_STREAM_SCOPE_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cuda_device_buffer.h"

namespace walsh {

// The calling thread's current device set to one, and restored on every path out.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) : device_(device) {}
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;
  ~CurrentDevice() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  absl::Status Set() {
    int previous = 0;
    RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&previous), "get device"));
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "set device"));
    previous_ = previous;
    return absl::OkStatus();
  }

 private:
  int device_;
  int previous_ = -1;
};

// A stream of one piece of work's own: synchronized and destroyed on every path out, after the
// buffers allocated in its order have been freed (declare it before them).
class OwnedStream {
 public:
  OwnedStream() = default;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream() {
    if (stream_ != nullptr) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
    }
  }
  absl::Status Create() {
    return CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "create stream");
  }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Device memory allocated and freed in one stream's order (cudaMallocAsync, the device's default
// pool): freeing it waits on nothing else on the device, where cudaFree waits for all of it.
class StreamBuffer {
 public:
  StreamBuffer() = default;
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() {
    if (ptr_ != nullptr) (void)cudaFreeAsync(ptr_, stream_);
  }

  absl::Status Allocate(int64_t bytes, cudaStream_t stream, const std::string& what) {
    void* p = nullptr;
    if (cudaError_t e =
            cudaMallocAsync(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)), stream);
        e != cudaSuccess) {
      (void)cudaGetLastError();
      if (e != cudaErrorMemoryAllocation) return CudaStatus(e, "allocate " + what);
      return absl::ResourceExhaustedError(absl::StrCat(
          "cuda: cannot allocate ", bytes, " bytes for ", what, ": ", cudaGetErrorString(e)));
    }
    ptr_ = p;
    stream_ = stream;
    return absl::OkStatus();
  }

  // An allocation holding `host`, copied in the stream's order (`host` must outlive the copy).
  template <typename T>
  absl::Status Upload(const std::vector<T>& host, cudaStream_t stream, const std::string& what) {
    const int64_t bytes = static_cast<int64_t>(host.size() * sizeof(T));
    RETURN_IF_ERROR(Allocate(bytes, stream, what));
    if (bytes == 0) return absl::OkStatus();
    return CudaStatus(cudaMemcpyAsync(ptr_, host.data(), bytes, cudaMemcpyHostToDevice, stream),
                      "upload " + what);
  }

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_CUDA_STREAM_SCOPE_H_
