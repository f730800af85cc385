#include "kernels/ternary_lanes_layout.h"

#include <string.h>

namespace walsh {

// Runs of bytes, not byte by byte: a 7 GB model repacks in seconds. Each copy below is one run
// of LanesByteOffset's mapping (tests/unit/kernels/ternary_lanes_layout_test.cc holds them
// equal).
void RepackToLanes(TernaryFormat format, const uint8_t* from, int64_t rows, int64_t cols,
                   uint8_t* to) {
  const int64_t bpr = cols / kTernaryBlockElems;
  const int64_t block_bytes = FormatTraits(format).block_bytes;
  const int64_t row_bytes = bpr * block_bytes;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = from + r * row_bytes;
    uint8_t* dst = to + r * row_bytes;
    for (int64_t b = 0; b < bpr; ++b) {
      const uint8_t* blk = src + b * block_bytes;
      if (format == TernaryFormat::kPq2_0) {
        memcpy(dst + LanesPq2Scales(bpr) + 2 * b, blk, 2);
        uint8_t* quad = dst + (b / 4) * 128 + 4 * (b % 4);
        for (int g = 0; g < 8; ++g) memcpy(quad + 16 * g, blk + 2 + 4 * g, 4);
      } else {
        memcpy(dst + 16 * b, blk, 16);
        memcpy(dst + LanesPtq1Hi(bpr) + 8 * b, blk + 16, 8);
        memcpy(dst + LanesPtq1Qh(bpr) + 2 * b, blk + 24, 2);
        memcpy(dst + LanesPtq1Scales(bpr) + 2 * b, blk + 26, 2);
      }
    }
  }
}

}  // namespace walsh
