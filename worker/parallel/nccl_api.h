// NCCL's C interface, the part walsh calls, loaded at run time (dlopen) rather than linked: the
// GPU machine carries NCCL as a Python wheel (nvidia/nccl/lib/libnccl.so.2) and no nccl.h, and
// a CPU build needs no NCCL at all. The types below are NCCL 2's ABI (nccl.h: ncclComm_t is an
// opaque pointer, ncclUniqueId 128 bytes, results and data types plain ints), as vLLM's pynccl
// declares them for the same reason. The library comes from $WALSH_NCCL_LIBRARY (a path), else
// libnccl.so.2 wherever the dynamic loader looks (LD_LIBRARY_PATH: point it at the wheel's
// nvidia/nccl/lib, or a CUDA toolkit's lib).
#ifndef WALSH_WORKER_PARALLEL_NCCL_API_H_
#define WALSH_WORKER_PARALLEL_NCCL_API_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace walsh::nccl {

struct CommTag;
using Comm = CommTag*;  // ncclComm_t

enum Result : int {  // ncclResult_t
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};
enum DataType : int { kUint8 = 1, kFloat32 = 7 };  // ncclDataType_t
enum RedOp : int { kSum = 0 };                     // ncclRedOp_t
struct UniqueId {                                  // ncclUniqueId
  char internal[128];
};

// The entry points, by their nccl.h names. A stream is a cudaStream_t.
struct Api {
  Result (*GetVersion)(int* version);
  const char* (*GetErrorString)(Result result);
  Result (*GetUniqueId)(UniqueId* id);
  Result (*CommInitRank)(Comm* comm, int ranks, UniqueId id, int rank);
  Result (*CommInitAll)(Comm* comms, int devices, const int* device_list);
  Result (*CommDestroy)(Comm comm);
  Result (*CommAbort)(Comm comm);
  Result (*CommGetAsyncError)(Comm comm, Result* async_error);
  Result (*Broadcast)(const void* send, void* recv, size_t count, DataType type, int root,
                      Comm comm, void* stream);
  Result (*AllReduce)(const void* send, void* recv, size_t count, DataType type, RedOp op,
                      Comm comm, void* stream);
  Result (*GroupStart)();
  Result (*GroupEnd)();
};

struct Version {
  int major = 0, minor = 0, patch = 0;
  bool AtLeast(int ma, int mi) const { return major > ma || (major == ma && minor >= mi); }
  std::string ToString() const;
};
// ncclGetVersion's code: major·10000 + minor·100 + patch from 2.9 on, major·1000 + minor·100 +
// patch before.
Version DecodeVersion(int code);

// The library's entry points, loaded once per process and kept; an error names where it looked
// and the symbol or variable at fault.
absl::StatusOr<const Api*> LoadApi();
// As LoadApi, from exactly this file (tests: a missing one).
absl::StatusOr<Api> LoadApiFrom(const std::string& library);

// Several ranks of one communicator on one device need NCCL 2.30 or later with
// NCCL_MULTI_RANK_GPU_ENABLE=1 in the environment (`multi_rank_env`: its value, or null when
// unset); one rank per device needs neither. The refusal names the version and the variable.
absl::Status CheckDeviceSharing(const Version& version, bool shared, const char* multi_rank_env);

}  // namespace walsh::nccl

#endif  // WALSH_WORKER_PARALLEL_NCCL_API_H_
