#include "worker/engine/backend_factory.h"

#include "worker/engine/cpu_backend.h"
#ifdef WALSH_HAVE_CUDA
#include "worker/engine/cuda_backend.h"
#endif

namespace walsh {

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const Model& model,
                                                     const EngineOptions& options, CpuIsa isa) {
  switch (options.device) {
    case Device::kCpu:
      return std::make_unique<CpuBackend>(model,
                                          CpuBackendOptions{options.threads, isa, options.profile});
    case Device::kCuda:
      if (!options.quantize_activations) {
        return absl::UnimplementedError(
            "--device cuda needs int8 activations; --no-activation-quant is a CPU debug mode");
      }
#ifdef WALSH_HAVE_CUDA
      return CudaBackend::Create(model, options.cuda_device, options.gpu_memory_utilization);
#else
      return absl::FailedPreconditionError(
          "--device cuda: this build has no CUDA backend (configure with nvcc present, "
          "-DWALSH_CUDA=ON)");
#endif
  }
  return absl::InvalidArgumentError("unknown device");
}

}  // namespace walsh
