// What walsh-bench's commands share in their reports: a failure's message on stderr, named by
// its command, with the exit code it returns; and the percentiles they quote of their timings.
#ifndef WALSH_TOOLS_BENCH_REPORT_H_
#define WALSH_TOOLS_BENCH_REPORT_H_

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace walsh {

inline int Fail(const char* command, int code, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", command, message.c_str());
  return code;
}

// The sample nearest the q-quantile (q in [0, 1]); 0 when there are none.
inline double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1,
                    static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace walsh

#endif  // WALSH_TOOLS_BENCH_REPORT_H_
