// NcclDevices on CUDA: cudaSetDevice, a blocking-sync event per wait (the waiting thread sleeps
// in the driver instead of spinning), and cudaMalloc'd scratch freed with the communicator.
#ifndef WALSH_WORKER_PARALLEL_NCCL_CUDA_DEVICES_H_
#define WALSH_WORKER_PARALLEL_NCCL_CUDA_DEVICES_H_

#include <memory>

#include "worker/parallel/nccl_communicator.h"

namespace walsh {

std::unique_ptr<NcclDevices> MakeCudaNcclDevices();

}  // namespace walsh

#endif  // WALSH_WORKER_PARALLEL_NCCL_CUDA_DEVICES_H_
