// How an engine is built: the device and its backend's knobs, the context, how activations and
// KV pages are stored. The cache budgets are the KV manager's (CacheOptions, kv_manager.h).
#ifndef WALSH_WORKER_ENGINE_ENGINE_OPTIONS_H_
#define WALSH_WORKER_ENGINE_ENGINE_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "kernels/cpu/isa.h"
#include "worker/engine/op_profile.h"

namespace walsh {

enum class Device { kCpu, kCuda };

// "cpu" or "cuda", as the --device flags spell them; false for anything else.
inline bool ParseDevice(const std::string& name, Device* out) {
  if (name == "cpu") *out = Device::kCpu;
  if (name == "cuda") *out = Device::kCuda;
  return name == "cpu" || name == "cuda";
}

// How KV pages store keys and values (kernels/token_ops.h): fp16 (the default), or int8 / 4-bit
// codes with an fp16 scale per 32 values of one position; fp32 is the fp32-activation debug
// mode's own.
enum class KvCacheDtype { kFp16, kQ8, kQ4, kF32 };

// "fp16", "q8" or "q4", as the --kv-cache-dtype flags spell them; false for anything else.
inline bool ParseKvCacheDtype(const std::string& name, KvCacheDtype* out) {
  if (name == "fp16") *out = KvCacheDtype::kFp16;
  if (name == "q8") *out = KvCacheDtype::kQ8;
  if (name == "q4") *out = KvCacheDtype::kQ4;
  return name == "fp16" || name == "q8" || name == "q4";
}

inline const char* KvCacheDtypeName(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::kFp16:
      return "fp16";
    case KvCacheDtype::kQ8:
      return "q8";
    case KvCacheDtype::kQ4:
      return "q4";
    case KvCacheDtype::kF32:
      break;
  }
  return "fp32";
}

// Storage units of n KV values: one per value, or one per 32 for q8 and q4.
inline int64_t KvUnits(KvCacheDtype d, int64_t n) {
  return d == KvCacheDtype::kQ8 || d == KvCacheDtype::kQ4 ? n / 32 : n;
}

// The one refusal of tensor parallelism on a GPU. CUDA ranks over NCCL are built
// (backend_group.cc) but not yet proven bit-identical on a device: until the GPU check
// (tests/gpu/run.sh) has, the flags of every binary and the engine refuse them, and only that
// check's own engines (EngineFaults::unproven_cuda_tp) run them.
inline absl::Status CheckDeviceTp(Device device, int64_t tp) {
  if (device == Device::kCuda && tp != 1) {
    return absl::UnimplementedError(
        "--tp must be 1 with --device cuda: CUDA ranks over NCCL are built but not yet proven "
        "bit-identical on a GPU (docs/gpu.md)");
  }
  return absl::OkStatus();
}

// Bytes of n KV values (n a multiple of 32 for q8 and q4).
inline int64_t KvBytes(KvCacheDtype d, int64_t n) {
  switch (d) {
    case KvCacheDtype::kFp16:
      return 2 * n;
    case KvCacheDtype::kQ8:
      return n / 32 * 34;
    case KvCacheDtype::kQ4:
      return n / 32 * 18;
    case KvCacheDtype::kF32:
      break;
  }
  return 4 * n;
}

struct EngineOptions {
  Device device = Device::kCpu;
  int cuda_device = 0;  // the first device of a CUDA engine
  // CUDA: the share of the device's memory the engine may hold (vLLM's meaning). A model whose
  // weights do not fit is refused with the numbers; what is left is the room the engine reports
  // for caches (Engine::CacheRoom), which cuts the KV manager's budgets.
  double gpu_memory_utilization = 0.9;
  int threads = 1;
  int64_t max_context = 0;  // 0: the model's context_length
  // Quantize activations to int8 before the ternary dot products (as llama.cpp does). Off is
  // a test/debug mode: fp32 activations against the decoded weights.
  bool quantize_activations = true;
  // KV page storage; with quantize_activations off, kFp16 stores fp32 (the debug mode's).
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kFp16;
  std::optional<CpuIsa> isa;  // default: the best this CPU supports
  // Tensor parallelism over in-process CPU ranks (1, 2, 4 or 8; one thread each), split by heads
  // per worker/parallel/shard_plan.h. CPU only.
  int tp = 1;
  std::chrono::milliseconds collective_timeout{10000};
  // When set, every backend op adds its time here (walsh-bench decode --profile): wall time on
  // the CPU, the stream's time between CUDA events on CUDA (worker/engine/cuda_op_timeline.h).
  OpProfile* profile = nullptr;
};

// Faults a test injects into an engine: a seam for tests, never set by walsh-worker (only the
// walsh-worker-faults test build has flags for them).
struct EngineFaults {
  int stall_rank = -1;  // this CPU rank stops taking steps after its first two (rank_threads.h)
  // CUDA ranks over NCCL before a device has proven them (CheckDeviceTp): the GPU check's engines
  // only.
  bool unproven_cuda_tp = false;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_ENGINE_OPTIONS_H_
