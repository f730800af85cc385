// For the CUDA tests: whether a device answers, and a skip where none does, except under
// WALSH_REQUIRE_CUDA=1 (the GPU check), where a missing device, or a driver that reports none,
// fails the test. Link walsh_kernels_cuda.
#ifndef WALSH_TESTS_UTIL_CUDA_DEVICE_H_
#define WALSH_TESTS_UTIL_CUDA_DEVICE_H_

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cuda/device_probe.h"

namespace walsh::testing {

inline bool HaveCudaDevice(std::string* why) {
  int count = 0;
  const int err = cuda::CountDevices(&count);
  if (err != 0 || count == 0) {
    *why = err != 0 ? cuda::ErrorString(err) : "no device found";
    return false;
  }
  return true;
}

inline bool CudaRequired() {
  const char* require = std::getenv("WALSH_REQUIRE_CUDA");
  return require != nullptr && std::string(require) == "1";
}

}  // namespace walsh::testing

#define SKIP_WITHOUT_CUDA()                                                             \
  do {                                                                                  \
    std::string why;                                                                    \
    if (!::walsh::testing::HaveCudaDevice(&why)) {                                      \
      if (::walsh::testing::CudaRequired()) FAIL() << "no CUDA device (" << why << ")"; \
      GTEST_SKIP() << "no CUDA device (" << why << ")";                                 \
    }                                                                                   \
  } while (0)

#endif  // WALSH_TESTS_UTIL_CUDA_DEVICE_H_
