// The rotary embedding's inverse frequencies base^(-2i / n_rot), computed once on the host and
// shared by every backend, so no device evaluates pow (docs/format.md §8.2).
#ifndef WALSH_WORKER_ENGINE_ROPE_TABLE_H_
#define WALSH_WORKER_ENGINE_ROPE_TABLE_H_

#include <cmath>
#include <cstdint>
#include <vector>

namespace walsh {

inline std::vector<double> RopeInverseFrequencies(int64_t n_rot, float base) {
  std::vector<double> out(n_rot / 2);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    out[i] = std::pow(static_cast<double>(base),
                      -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
  }
  return out;
}

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_ROPE_TABLE_H_
