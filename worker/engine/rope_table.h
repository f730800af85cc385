// The rotary embedding's tables, computed once on the host and shared by every backend: the
// inverse frequencies base^(-2i / n_rot), so no device evaluates pow (docs/format.md §8.2), and
// the position stream each pair takes under M-RoPE (docs/vision.md §4).
#ifndef WALSH_WORKER_ENGINE_ROPE_TABLE_H_
#define WALSH_WORKER_ENGINE_ROPE_TABLE_H_

#include <array>
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

// Interleaved sections (the file's IMROPE): with s = i mod Σsections, pair i takes stream t when
// s % 3 == 0 and s < 3·sections[0], h when s % 3 == 1 and s < 3·sections[1], w when s % 3 == 2
// and s < 3·sections[2], and the fourth stream otherwise. [11, 11, 10, 0] gives t, h, w by
// i mod 3 over all 32 pairs.
inline std::vector<uint8_t> RopeStreamOfPair(int64_t n_rot,
                                             const std::array<int64_t, 4>& sections) {
  const int64_t period = sections[0] + sections[1] + sections[2] + sections[3];
  std::vector<uint8_t> out(n_rot / 2, 3);
  for (int64_t i = 0; i < n_rot / 2 && period > 0; ++i) {
    const int64_t s = i % period;
    for (int stream = 0; stream < 3; ++stream) {
      if (s % 3 == stream && s < 3 * sections[stream]) out[i] = static_cast<uint8_t>(stream);
    }
  }
  return out;
}

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_ROPE_TABLE_H_
