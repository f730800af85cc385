// M-RoPE positions (docs/vision.md §4): the (t, h, w) positions of a sequence's tokens when it
// holds images. A text token's three positions are equal; an image's rows spread over its grid;
// and every token after an image trails its place in the sequence by what the image saved.
#ifndef WALSH_WORKER_ENGINE_MROPE_POSITIONS_H_
#define WALSH_WORKER_ENGINE_MROPE_POSITIONS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace walsh {

// An image in a sequence: grid_h × grid_w pad tokens (merged rows, row-major) from token `first`.
struct ImageSpan {
  int64_t first = 0;
  int64_t grid_h = 0, grid_w = 0;

  int64_t tokens() const { return grid_h * grid_w; }
  int64_t end() const { return first + tokens(); }
};

// The t, h and w positions of tokens [begin, end) of a sequence whose images are `images` (in
// sequence order, not overlapping): 3 per token. An image whose first token would sit at p0 puts
// its row y, column x at (p0, p0 + y, p0 + x), and the token after it at p0 + max(grid_h, grid_w).
std::vector<int32_t> MropePositions(absl::Span<const ImageSpan> images, int64_t begin, int64_t end);

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_MROPE_POSITIONS_H_
