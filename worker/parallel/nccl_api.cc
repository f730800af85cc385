#include "worker/parallel/nccl_api.h"

#include <dlfcn.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace walsh::nccl {
namespace {

constexpr char kLibraryVariable[] = "WALSH_NCCL_LIBRARY";
constexpr char kDefaultLibrary[] = "libnccl.so.2";

template <typename F>
absl::Status Bind(void* handle, const std::string& library, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  if (*out == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(library, " has no ", name, ": not an NCCL 2 library"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string Version::ToString() const { return absl::StrCat(major, ".", minor, ".", patch); }

Version DecodeVersion(int code) {
  if (code >= 10000) return {code / 10000, (code % 10000) / 100, code % 100};
  return {code / 1000, (code % 1000) / 100, code % 100};
}

absl::StatusOr<Api> LoadApiFrom(const std::string& library) {
  // Kept loaded for the process's life: communicators outlive any one caller.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL: cannot load ", library, " (", why != nullptr ? why : "unknown error",
                     "); set ", kLibraryVariable,
                     " to libnccl.so.2's path, or LD_LIBRARY_PATH to its directory (a CUDA "
                     "toolkit's lib, or the nvidia-nccl wheel's nvidia/nccl/lib)"));
  }
  Api api{};
  absl::Status s = Bind(handle, library, "ncclGetVersion", &api.GetVersion);
  if (s.ok()) s = Bind(handle, library, "ncclGetErrorString", &api.GetErrorString);
  if (s.ok()) s = Bind(handle, library, "ncclGetUniqueId", &api.GetUniqueId);
  if (s.ok()) s = Bind(handle, library, "ncclCommInitRank", &api.CommInitRank);
  if (s.ok()) s = Bind(handle, library, "ncclCommInitAll", &api.CommInitAll);
  if (s.ok()) s = Bind(handle, library, "ncclCommDestroy", &api.CommDestroy);
  if (s.ok()) s = Bind(handle, library, "ncclCommAbort", &api.CommAbort);
  if (s.ok()) s = Bind(handle, library, "ncclCommGetAsyncError", &api.CommGetAsyncError);
  if (s.ok()) s = Bind(handle, library, "ncclBroadcast", &api.Broadcast);
  if (s.ok()) s = Bind(handle, library, "ncclAllReduce", &api.AllReduce);
  if (s.ok()) s = Bind(handle, library, "ncclGroupStart", &api.GroupStart);
  if (s.ok()) s = Bind(handle, library, "ncclGroupEnd", &api.GroupEnd);
  if (!s.ok()) return s;
  return api;
}

absl::StatusOr<const Api*> LoadApi() {
  static const absl::StatusOr<Api>* loaded = [] {
    const char* path = std::getenv(kLibraryVariable);
    return new absl::StatusOr<Api>(LoadApiFrom(path != nullptr && *path ? path : kDefaultLibrary));
  }();
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

absl::Status CheckDeviceSharing(const Version& version, bool shared, const char* multi_rank_env) {
  if (!shared) return absl::OkStatus();
  if (!version.AtLeast(2, 30)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ranks sharing a GPU need NCCL 2.30 or later (NCCL_MULTI_RANK_GPU_ENABLE); this is NCCL ",
        version.ToString()));
  }
  if (multi_rank_env == nullptr || std::string(multi_rank_env) != "1") {
    return absl::FailedPreconditionError(absl::StrCat(
        "ranks sharing a GPU need NCCL_MULTI_RANK_GPU_ENABLE=1 in the environment (NCCL ",
        version.ToString(), "; it is ", multi_rank_env == nullptr ? "unset" : multi_rank_env, ")"));
  }
  return absl::OkStatus();
}

}  // namespace walsh::nccl
