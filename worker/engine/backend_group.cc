#include "worker/engine/backend_group.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/isa.h"
#include "worker/engine/cpu_backend.h"
#include "worker/parallel/cpu_communicator.h"
#ifdef WALSH_HAVE_CUDA
#include "worker/engine/cuda_backend.h"
#endif

namespace walsh {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const Model& model,
                                                         const EngineOptions& options) {
  if (!options.quantize_activations) {
    return absl::UnimplementedError(
        "--device cuda needs int8 activations; --no-activation-quant is a CPU debug mode");
  }
#ifdef WALSH_HAVE_CUDA
  return CudaBackend::Create(model, options.cuda_device, options.gpu_memory_utilization,
                             options.profile);
#else
  (void)model;
  return absl::FailedPreconditionError(
      "--device cuda: this build has no CUDA backend (configure with nvcc present, "
      "-DWALSH_CUDA=ON)");
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
      RETURN_IF_ERROR(CheckDeviceTp(Device::kCuda, options.tp));
      group.kernels_ = "cuda";
      auto backend = MakeCudaBackend(model, options);
      if (!backend.ok()) return backend.status();
      group.backends_.push_back(std::move(*backend));
      return group;
    }
  }
  return absl::InvalidArgumentError("unknown device");
}

}  // namespace walsh
