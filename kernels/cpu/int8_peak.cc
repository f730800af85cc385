#include "kernels/cpu/int8_peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/cpu/isa.h"

namespace walsh {

double MeasureInt8Peak(int threads, Int8PeakInstruction instruction, int passes) {
#if !WALSH_X86_KERNELS
  (void)threads, (void)instruction, (void)passes;
  return 0;
#else
  const bool vnni = instruction != Int8PeakInstruction::kMaddubs;
  if (!CpuSupports(vnni ? CpuIsa::kAvx512Vnni : CpuIsa::kAvx2)) return 0;
  const double per_instruction = instruction == Int8PeakInstruction::kDpbusd512 ? 64 : 32;
  const auto chains = [instruction](int64_t iterations) -> int32_t {
    switch (instruction) {
      case Int8PeakInstruction::kMaddubs:
        return RunMaddubsChains(iterations);
      case Int8PeakInstruction::kDpbusd:
        return RunDpbusdChains(iterations);
      case Int8PeakInstruction::kDpbusd512:
        return RunDpbusd512Chains(iterations);
    }
    return 0;
  };
  constexpr int64_t kIterations = int64_t{1} << 22;  // 12 · 2^22 instructions, ~15 ms a thread
  std::atomic<int32_t> sink{0};
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] { sink += chains(kIterations); });
    }
    for (auto& th : pool) th.join();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 12.0 * per_instruction * kIterations * threads / s);
  }
  return sink.load() == 0x7fffffff ? best + 1 : best;  // the results must be computed
#endif
}

}  // namespace walsh
