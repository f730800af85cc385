#include "worker/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

absl::Status NcclError(const char* call, ncclResult_t r) {
  return absl::InternalError(absl::StrCat(call, ": ", ncclGetErrorString(r)));
}

absl::Status CudaError(const char* call, cudaError_t e) {
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorString(e)));
}

}  // namespace

struct NcclCommunicator::Impl {
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<float*> scratch;
  std::atomic<bool> broken{false};
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(int devices) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess)
    return CudaError("cudaGetDeviceCount", e);
  if (count < devices) {
    return absl::FailedPreconditionError(
        absl::StrCat(devices, " GPUs asked for, ", count, " present"));
  }
  auto impl = std::make_unique<Impl>();
  impl->comms.resize(devices);
  std::vector<int> devlist(devices);
  for (int i = 0; i < devices; ++i) devlist[i] = i;
  if (ncclResult_t r = ncclCommInitAll(impl->comms.data(), devices, devlist.data());
      r != ncclSuccess) {
    return NcclError("ncclCommInitAll", r);
  }
  impl->streams.resize(devices);
  impl->scratch.resize(devices);
  for (int i = 0; i < devices; ++i) {
    cudaSetDevice(i);
    if (cudaError_t e = cudaStreamCreate(&impl->streams[i]); e != cudaSuccess)
      return CudaError("cudaStreamCreate", e);
    if (cudaError_t e = cudaMalloc(&impl->scratch[i], sizeof(float)); e != cudaSuccess)
      return CudaError("cudaMalloc", e);
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(impl)));
}

NcclCommunicator::~NcclCommunicator() {
  for (size_t i = 0; i < impl_->comms.size(); ++i) {
    cudaSetDevice(static_cast<int>(i));
    ncclCommDestroy(impl_->comms[i]);
    cudaStreamDestroy(impl_->streams[i]);
    cudaFree(impl_->scratch[i]);
  }
}

int NcclCommunicator::size() const { return static_cast<int>(impl_->comms.size()); }

bool NcclCommunicator::broken() const { return impl_->broken.load(); }

absl::Status NcclCommunicator::Wait(int rank, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const cudaError_t e = cudaStreamQuery(impl_->streams[rank]);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return CudaError("cudaStreamQuery", e);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(impl_->comms[rank], &async);
    if (async != ncclSuccess) return NcclError("NCCL async error", async);
    if (std::chrono::steady_clock::now() >= end) {
      ncclCommAbort(impl_->comms[rank]);
      impl_->broken.store(true);
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", rank, ": NCCL collective did not complete within ", timeout.count(),
                       " ms; communicator aborted"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

absl::Status NcclCommunicator::Barrier(int rank, std::chrono::milliseconds timeout) {
  cudaSetDevice(rank);
  if (ncclResult_t r = ncclAllReduce(impl_->scratch[rank], impl_->scratch[rank], 1, ncclFloat,
                                     ncclSum, impl_->comms[rank], impl_->streams[rank]);
      r != ncclSuccess) {
    return NcclError("ncclAllReduce", r);
  }
  return Wait(rank, timeout);
}

absl::Status NcclCommunicator::AllGatherInPlace(int rank, float* buffer,
                                                const std::vector<size_t>& offsets,
                                                const std::vector<size_t>& counts,
                                                std::chrono::milliseconds timeout) {
  cudaSetDevice(rank);
  ncclGroupStart();
  for (int r = 0; r < size(); ++r) {
    ncclBroadcast(buffer + offsets[r], buffer + offsets[r], counts[r], ncclFloat, r,
                  impl_->comms[rank], impl_->streams[rank]);
  }
  if (ncclResult_t res = ncclGroupEnd(); res != ncclSuccess) return NcclError("ncclGroupEnd", res);
  return Wait(rank, timeout);
}

absl::Status NcclCommunicator::AllReduceSum(int rank, float* buffer, size_t count,
                                            std::chrono::milliseconds timeout) {
  cudaSetDevice(rank);
  if (ncclResult_t r = ncclAllReduce(buffer, buffer, count, ncclFloat, ncclSum, impl_->comms[rank],
                                     impl_->streams[rank]);
      r != ncclSuccess) {
    return NcclError("ncclAllReduce", r);
  }
  return Wait(rank, timeout);
}

absl::Status NcclCommunicator::Broadcast(int rank, int root, void* buffer, size_t bytes,
                                         std::chrono::milliseconds timeout) {
  cudaSetDevice(rank);
  if (ncclResult_t r = ncclBroadcast(buffer, buffer, bytes, ncclUint8, root, impl_->comms[rank],
                                     impl_->streams[rank]);
      r != ncclSuccess) {
    return NcclError("ncclBroadcast", r);
  }
  return Wait(rank, timeout);
}

}  // namespace walsh
