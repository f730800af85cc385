// Wall time for the walsh-bench commands: seconds since a steady-clock point.
#ifndef WALSH_TOOLS_BENCH_STOPWATCH_H_
#define WALSH_TOOLS_BENCH_STOPWATCH_H_

#include <chrono>

namespace walsh {

using SteadyClock = std::chrono::steady_clock;

inline double Since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

}  // namespace walsh

#endif  // WALSH_TOOLS_BENCH_STOPWATCH_H_
