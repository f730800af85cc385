#include "worker/engine/backend_group.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/isa.h"
#include "worker/engine/cpu_backend.h"
#include "worker/parallel/cpu_communicator.h"
#include "worker/parallel/nccl_communicator.h"
#ifdef WALSH_HAVE_CUDA
#include "kernels/cuda/device_probe.h"
#include "worker/engine/cuda_backend.h"
#include "worker/parallel/nccl_api.h"
#include "worker/parallel/nccl_cuda_devices.h"
#endif

namespace walsh {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const Model& model,
                                                         const EngineOptions& options, int device,
                                                         double memory_share) {
  if (!options.quantize_activations) {
    return absl::UnimplementedError(
        "--no-activation-quant with --device cuda: never offered. fp32 activations are the CPU's "
        "debug reference for the int8 path (products over decoded weights); the CUDA backend is "
        "proven against the CPU's int8 path bit for bit, so compare with --device cpu instead");
  }
#ifdef WALSH_HAVE_CUDA
  return CudaBackend::Create(model, device, memory_share, options.profile);
#else
  (void)model;
  (void)device;
  (void)memory_share;
  return absl::FailedPreconditionError(
      "--device cuda: this build has no CUDA backend (configure with nvcc present, "
      "-DWALSH_CUDA=ON)");
#endif
}

// The visible CUDA devices.
absl::StatusOr<int> CudaDeviceCount() {
#ifdef WALSH_HAVE_CUDA
  int n = 0;
  if (const int e = cuda::CountDevices(&n); e != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device cuda: no CUDA device answers (", cuda::ErrorString(e), ")"));
  }
  return n;
#else
  return absl::FailedPreconditionError("--device cuda: this build has no CUDA backend");
#endif
}

// CUDA ranks: rank r on visible device (first + r) mod the devices there are, so ranks share
// devices only where there are fewer than ranks (NCCL then needs NCCL_MULTI_RANK_GPU_ENABLE=1);
// ranks on one device split --gpu-memory-utilization between them. Their collectives run over
// NCCL on each rank's compute stream.
absl::Status MakeCudaRanks(const Model& model, const EngineOptions& options,
                           std::vector<std::unique_ptr<Backend>>& backends,
                           std::unique_ptr<Communicator>& comm) {
  const int ranks = options.tp;
  if (options.cuda_device < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", options.cuda_device));
  }
  int devices = 1;
  if (ranks > 1) {
    ASSIGN_OR_RETURN(devices, CudaDeviceCount());
    if (options.cuda_device < 0 || options.cuda_device >= devices) {
      return absl::InvalidArgumentError(
          absl::StrCat("CUDA device ", options.cuda_device, " of the ", devices, " visible"));
    }
  }
  std::vector<int> device_of(ranks);
  std::vector<int> sharing(std::max(devices, options.cuda_device + 1), 0);
  for (int r = 0; r < ranks; ++r) {
    device_of[r] = ranks > 1 ? (options.cuda_device + r) % devices : options.cuda_device;
    ++sharing[device_of[r]];
  }
  std::vector<NcclCommunicator::Rank> places;
  for (int r = 0; r < ranks; ++r) {
    ASSIGN_OR_RETURN(std::unique_ptr<Backend> b,
                     MakeCudaBackend(model, options, device_of[r],
                                     options.gpu_memory_utilization / sharing[device_of[r]]));
    places.push_back({b->device(), b->device_stream()});
    backends.push_back(std::move(b));
  }
  if (ranks == 1) return absl::OkStatus();
#ifdef WALSH_HAVE_CUDA
  ASSIGN_OR_RETURN(const nccl::Api* api, nccl::LoadApi());
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                   NcclCommunicator::Create(*api, MakeCudaNcclDevices(), std::move(places)));
  comm = std::move(nccl);
  return absl::OkStatus();
#else
  (void)comm;
  return absl::InternalError("CUDA ranks in a build without CUDA");
#endif
}

}  // namespace

BackendGroup::~BackendGroup() = default;

absl::Status BackendGroup::Run(const std::function<absl::Status(int)>& work) {
  return threads_ == nullptr ? work(0) : threads_->Run(work);
}

absl::StatusOr<BackendGroup> MakeBackendGroup(const Model& model, const EngineOptions& options,
                                              const EngineFaults& faults,
                                              ProcessGroup process_group) {
  if (options.tp < 1) return absl::InvalidArgumentError("tensor-parallel ranks must be >= 1");
  BackendGroup group;
  const bool across = process_group.comm != nullptr;
  if (across) {
    if (process_group.comm->size() != options.tp || process_group.rank < 0 ||
        process_group.rank >= options.tp) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", process_group.rank, " of a process group of ",
                       process_group.comm->size(), " cannot serve --tp ", options.tp));
    }
    if (options.device != Device::kCpu) {
      return absl::UnimplementedError(
          "a tensor-parallel group across processes runs on CPU ranks (gloo); CUDA ranks need "
          "NCCL, which this build does not wire in yet");
    }
    group.first_rank_ = process_group.rank;
    group.comm_ = std::move(process_group.comm);
  }
  switch (options.device) {
    case Device::kCpu: {
      if (options.isa && !CpuSupports(*options.isa)) {
        return absl::InvalidArgumentError(
            absl::StrCat("this CPU does not support the ", CpuIsaName(*options.isa), " kernels",
                         WALSH_X86_KERNELS ? "" : " (this build has the scalar path only)"));
      }
      const CpuIsa isa = options.isa.value_or(BestCpuIsa());
      group.kernels_ = CpuIsaName(isa);
      const int ranks = across ? 1 : options.tp;
      if (!across && ranks > 1) {
        group.comm_ = std::make_unique<CpuCommunicator>(ranks);
        group.threads_ =
            std::make_unique<RankThreads>(ranks, options.collective_timeout * 2, faults.stall_rank);
      }
      // One thread per CPU rank when there are several.
      const int threads = ranks > 1 ? 1 : options.threads;
      for (int r = 0; r < ranks; ++r) {
        group.backends_.push_back(
            std::make_unique<CpuBackend>(model, CpuBackendOptions{threads, isa, options.profile}));
      }
      return group;
    }
    case Device::kCuda: {
      if (!faults.unproven_cuda_tp) RETURN_IF_ERROR(CheckDeviceTp(Device::kCuda, options.tp));
      group.kernels_ = "cuda";
      RETURN_IF_ERROR(MakeCudaRanks(model, options, group.backends_, group.comm_));
      if (options.tp > 1) {
        group.threads_ = std::make_unique<RankThreads>(options.tp, options.collective_timeout * 2,
                                                       faults.stall_rank);
      }
      return group;
    }
  }
  return absl::InvalidArgumentError("unknown device");
}

}  // namespace walsh
