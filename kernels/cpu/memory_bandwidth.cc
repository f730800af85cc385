#include "kernels/cpu/memory_bandwidth.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "kernels/cpu/isa.h"

namespace walsh {
namespace {

float SumScalar(const float* p, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  const int64_t q = n / 4;
  for (int64_t i = 0; i < q; ++i) {
    s0 += p[i], s1 += p[q + i], s2 += p[2 * q + i], s3 += p[3 * q + i];
  }
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

double MeasureReadBandwidth(int threads, int64_t bytes, int passes, YardstickPages pages) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(float)) / (64 * threads) * (64 * threads);
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t mapped = static_cast<size_t>(n) * sizeof(float) + kHugePage;
  void* mapping = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return 0.0;
  float* const data = reinterpret_cast<float*>(
      (reinterpret_cast<uintptr_t>(mapping) + kHugePage - 1) / kHugePage * kHugePage);
  // Advice only: where THP is off both read small pages.
  (void)madvise(data, static_cast<size_t>(n) * sizeof(float),
                pages == YardstickPages::kHuge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::fill(data, data + n, 1.0f);  // touched: every page is resident before timing
#if WALSH_X86_KERNELS
  const bool avx2 = CpuSupports(CpuIsa::kAvx2);
#endif
  std::vector<float> sums(threads);
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const float* part = data + n / threads * t;
#if WALSH_X86_KERNELS
        sums[t] = avx2 ? SumFourStreamsAvx2(part, n / threads) : SumScalar(part, n / threads);
#else
        sums[t] = SumScalar(part, n / threads);
#endif
      });
    }
    for (auto& th : pool) th.join();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(n) * sizeof(float) / s);
  }
  volatile float sink = sums[0];  // the sums must be computed
  (void)sink;
  munmap(mapping, mapped);
  return best;
}

}  // namespace walsh
