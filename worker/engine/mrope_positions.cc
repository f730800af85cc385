#include "worker/engine/mrope_positions.h"

#include <algorithm>

namespace walsh {

std::vector<int32_t> MropePositions(absl::Span<const ImageSpan> images, int64_t begin,
                                    int64_t end) {
  std::vector<int32_t> out;
  out.reserve(3 * std::max<int64_t>(0, end - begin));
  // shift: how far the tokens before the next image trail their places in the sequence.
  int64_t shift = 0;
  size_t next = 0;
  for (int64_t i = begin; i < end; ++i) {
    while (next < images.size() && images[next].end() <= i) {
      const ImageSpan& done = images[next++];
      shift += std::max(done.grid_h, done.grid_w) - done.tokens();
    }
    if (next < images.size() && images[next].first <= i) {
      const ImageSpan& image = images[next];
      const int64_t p0 = image.first + shift, k = i - image.first;
      out.push_back(static_cast<int32_t>(p0));
      out.push_back(static_cast<int32_t>(p0 + k / image.grid_w));
      out.push_back(static_cast<int32_t>(p0 + k % image.grid_w));
    } else {
      out.insert(out.end(), 3, static_cast<int32_t>(i + shift));
    }
  }
  return out;
}

}  // namespace walsh
