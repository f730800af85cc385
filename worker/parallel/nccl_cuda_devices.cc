#include "worker/parallel/nccl_cuda_devices.h"

#include <cuda_runtime.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

absl::Status CudaError(const char* call, cudaError_t e) {
  return absl::UnavailableError(absl::StrCat(call, ": ", cudaGetErrorString(e)));
}

class CudaNcclDevices final : public NcclDevices {
 public:
  ~CudaNcclDevices() override {
    for (const auto& [device, p] : scratch_) {
      cudaSetDevice(device);
      cudaFree(p);
    }
  }
  absl::Status Select(int device) override {
    if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
      return CudaError("cudaSetDevice", e);
    return absl::OkStatus();
  }
  absl::Status Synchronize(void* stream) override {
    cudaEvent_t done;
    if (cudaError_t e =
            cudaEventCreateWithFlags(&done, cudaEventBlockingSync | cudaEventDisableTiming);
        e != cudaSuccess) {
      return CudaError("cudaEventCreateWithFlags", e);
    }
    cudaError_t e = cudaEventRecord(done, static_cast<cudaStream_t>(stream));
    if (e == cudaSuccess) e = cudaEventSynchronize(done);
    cudaEventDestroy(done);
    if (e != cudaSuccess) return CudaError("waiting for the collective's stream", e);
    return absl::OkStatus();
  }
  absl::StatusOr<void*> Scratch(int device, size_t bytes) override {
    if (absl::Status s = Select(device); !s.ok()) return s;
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) return CudaError("cudaMalloc", e);
    if (cudaError_t e = cudaMemset(p, 0, bytes); e != cudaSuccess) {
      cudaFree(p);
      return CudaError("cudaMemset", e);
    }
    scratch_.push_back({device, p});
    return p;
  }

 private:
  std::vector<std::pair<int, void*>> scratch_;
};

}  // namespace

std::unique_ptr<NcclDevices> MakeCudaNcclDevices() { return std::make_unique<CudaNcclDevices>(); }

}  // namespace walsh
