// One warp's tile of the tensor-core ternary product (kernels/cuda/ternary_mma.cu): 16 rows × 8
// tokens, one int8 mma.m16n8k16 per (block, group), since a 16-element group is exactly the
// MMA's k. Which elements each lane holds is PTX's fragment layout for .s8 m16n8k16
// (groupID = lane / 4, threadID_in_group = lane % 4):
//   A (codes):  a0 row groupID, a1 row groupID + 8, k = 4 · threadID_in_group + byte;
//   B (int8 x): k = 4 · threadID_in_group + byte, token column groupID;
//   C, D:       c0, c1 row groupID, c2, c3 row groupID + 8; token column
//               2 · threadID_in_group + (i & 1).
// The k order inside a group is the activation layout's (Q8Layout), so lane t's A word is the
// t-th code word a dp4a lane would use and its B word the t-th activation word: the MMA's sum is
// the group's exact Σ code · q. The accumulator starts at the bits of 12582912.0f plus −Σq, so
// D's bits are those of the float 12582912 + isum, and one subtraction gives float(isum) exactly
// (|isum| < 2^22), without an int-to-float conversion. The float chains then follow the
// canonical combine (kernels/ternary_block_combine.h) element by element.
#ifndef WALSH_KERNELS_TERNARY_MMA_TILE_H_
#define WALSH_KERNELS_TERNARY_MMA_TILE_H_

#include <stdint.h>

#include "kernels/float_convert.h"
#include "kernels/host_device.h"
#include "kernels/ternary_lane_sums.h"

namespace walsh {

inline constexpr int kMmaTileRows = 16;
inline constexpr int kMmaTileTokens = 8;
inline constexpr int32_t kMmaSumBias = 0x4B400000;  // the bits of 12582912.0f = 1.5 · 2^23

// The row (0..15) and token (0..7) of accumulator element e (0..3) of lane `lane`.
WALSH_HD constexpr int MmaAccRow(int lane, int e) { return (lane >> 2) + (e >= 2 ? 8 : 0); }
WALSH_HD constexpr int MmaAccToken(int lane, int e) { return 2 * (lane & 3) + (e & 1); }

// The accumulator's starting bits for a token whose group has −Σq = minus_sum.
WALSH_HD int32_t MmaSumStart(int32_t minus_sum) { return kMmaSumBias + minus_sum; }

// float(minus_sum + isum) from the accumulator's final bits.
WALSH_HD float MmaSumToFloat(int32_t bits) {
  return BitsFloat(static_cast<uint32_t>(bits)) - 12582912.0f;
}

// PQ2_0: lane t's A word of a row's group from the group's code word: plane t.
WALSH_HD uint32_t Pq2MmaCodes(uint32_t group_word, int t) {
  return (group_word >> (2 * t)) & 0x03030303u;
}

}  // namespace walsh

#endif  // WALSH_KERNELS_TERNARY_MMA_TILE_H_
