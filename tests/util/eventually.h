// The one way a test waits for a state another thread or process reaches: poll a condition until
// it holds or a deadline passes, never a fixed sleep that hopes it is long enough.
#ifndef WALSH_TESTS_UTIL_EVENTUALLY_H_
#define WALSH_TESTS_UTIL_EVENTUALLY_H_

#include <chrono>
#include <functional>
#include <thread>

namespace walsh::testing {

// True once `condition` holds, polled every `every`; false if it still does not at `timeout`
// (checked one last time then).
inline bool Eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10),
                       std::chrono::milliseconds every = std::chrono::milliseconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(every);
  }
  return condition();
}

}  // namespace walsh::testing

#endif  // WALSH_TESTS_UTIL_EVENTUALLY_H_
