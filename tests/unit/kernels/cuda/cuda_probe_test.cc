// Proves the CUDA toolchain end to end where a GPU exists; skips cleanly where none does.
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device_probe.h"

namespace walsh {
namespace {

TEST(CudaProbe, SaxpyOnEveryDevice) {
  int count = 0;
  const int err = cuda::CountDevices(&count);
  if (err != 0 || count == 0) {
    GTEST_SKIP() << "no CUDA device (" << (err ? cuda::ErrorString(err) : "none found") << ")";
  }
  for (int d = 0; d < count; ++d) {
    const int64_t n = 1000;
    std::vector<float> x(n), y(n), out(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i);
      y[i] = 1.0f;
    }
    ASSERT_EQ(cuda::SaxpyOnDevice(d, 2.0f, x.data(), y.data(), out.data(), n), 0);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.0f * i + 1.0f);
  }
}

}  // namespace
}  // namespace walsh
