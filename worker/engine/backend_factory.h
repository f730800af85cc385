// Makes the backend an engine's options ask for: the CPU backend, or the CUDA backend when this
// build has one and a device answers. A device that cannot be had is an error naming why.
#ifndef WALSH_WORKER_ENGINE_BACKEND_FACTORY_H_
#define WALSH_WORKER_ENGINE_BACKEND_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/isa.h"
#include "worker/engine/backend.h"
#include "worker/engine/engine_options.h"

namespace walsh {

// `model` must outlive the backend.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const Model& model,
                                                     const EngineOptions& options, CpuIsa isa);

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_BACKEND_FACTORY_H_
