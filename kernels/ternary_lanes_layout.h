// The lanes layout: a ternary row's bytes reordered at upload so that the CUDA mat-vec
// (kernels/cuda/ternary_matvec.cu) reads whole 16-byte runs, each lane exactly the bytes of
// the group it sums (docs/cuda.md "The lanes layout"). Each row keeps its place and its size
// (row r at r · row_bytes, as in the file), so the device holds one copy at file size. Inside a
// row of B blocks (B a multiple of 8):
//   PQ2_0:  codes, B/4 quads of 128 bytes: quad q holds, for group g = 0..7 in turn, the 4 code
//           bytes of group g (qs[4g .. 4g+3]) of blocks 4q .. 4q+3: 16 bytes per lane;
//           then the B fp16 scales.
//   PTQ1_0: lo, qs[0..15] of each block (16 bytes; groups 0..4 are its five digit planes);
//           hi, qs[16..23] of each block (8 bytes); qh of each block (2 bytes); the B scales.
#ifndef WALSH_KERNELS_TERNARY_LANES_LAYOUT_H_
#define WALSH_KERNELS_TERNARY_LANES_LAYOUT_H_

#include <stdint.h>

#include "kernels/block_types.h"
#include "kernels/float_convert.h"
#include "kernels/host_device.h"
#include "kernels/ternary_block_decode.h"
#include "kernels/ternary_weights.h"
#include "kernels/weight_format.h"

namespace walsh {

inline constexpr int64_t kLanesBlocksMultiple = 8;

// Whether rows of `cols` weights take the lanes layout: 8 blocks per row keep every run of
// every row 16-byte aligned in both formats.
WALSH_HD constexpr bool LanesLayoutFits(int64_t cols) {
  return cols > 0 && cols % (kTernaryBlockElems * kLanesBlocksMultiple) == 0;
}

// Where byte i of block b (its offset in the file's block struct) lands in a lanes-layout row
// of `bpr` blocks.
WALSH_HD int64_t LanesByteOffset(TernaryFormat format, int64_t bpr, int64_t b, int i) {
  if (format == TernaryFormat::kPq2_0) {
    if (i < 2) return 32 * bpr + 2 * b + i;  // d
    const int m = i - 2;                     // qs[m]: group m / 4, byte m % 4 of its word
    return (b / 4) * 128 + 16 * (m / 4) + 4 * (b % 4) + m % 4;
  }
  if (i < 16) return 16 * b + i;
  if (i < 24) return 16 * bpr + 8 * b + (i - 16);
  if (i < 26) return 24 * bpr + 2 * b + (i - 24);
  return 26 * bpr + 2 * b + (i - 26);  // d
}

// Offsets of the runs inside a lanes-layout row.
WALSH_HD constexpr int64_t LanesPq2Scales(int64_t bpr) { return 32 * bpr; }
WALSH_HD constexpr int64_t LanesPtq1Hi(int64_t bpr) { return 16 * bpr; }
WALSH_HD constexpr int64_t LanesPtq1Qh(int64_t bpr) { return 24 * bpr; }
WALSH_HD constexpr int64_t LanesPtq1Scales(int64_t bpr) { return 26 * bpr; }

// The scale of block b of a lanes-layout row.
WALSH_HD float LanesScale(TernaryFormat format, const uint8_t* row, int64_t bpr, int64_t b) {
  const int64_t at =
      format == TernaryFormat::kPq2_0 ? LanesPq2Scales(bpr) + 2 * b : LanesPtq1Scales(bpr) + 2 * b;
  return Fp16ToFloat(static_cast<uint16_t>(row[at] | row[at + 1] << 8));
}

// One dequantized weight, element j of block b, of a lanes-layout row (the embedding lookup).
WALSH_HD float DequantizeTernaryLanes(TernaryFormat format, const uint8_t* row, int64_t bpr,
                                      int64_t b, int j) {
  int code;
  if (format == TernaryFormat::kPq2_0) {
    const uint8_t byte = row[LanesByteOffset(format, bpr, b, 2 + (j >> 2))];
    code = (byte >> (2 * (j & 3))) & 3;
  } else {
    const Ptq1TritPlace at = Ptq1TritAt(j);
    code = DecodeTrit(row[LanesByteOffset(format, bpr, b, at.byte)], at.digit);
  }
  return static_cast<float>(code - 1) * LanesScale(format, row, bpr, b);
}

// Reorders `rows` file-layout rows of `cols` weights (LanesLayoutFits) into the lanes layout.
// `from` and `to` are weights.bytes() long and must not overlap.
void RepackToLanes(TernaryFormat format, const uint8_t* from, int64_t rows, int64_t cols,
                   uint8_t* to);

}  // namespace walsh

#endif  // WALSH_KERNELS_TERNARY_LANES_LAYOUT_H_
