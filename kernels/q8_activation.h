// Activations quantized to int8 for the integer ternary dot products, as llama.cpp does for
// these weight types: Q8_0 numerics (blocks of 32 values, scale = max|x| / 127 rounded to
// fp16, q = round(x / scale)), grouped four to a 128-weight block. The int8 values are stored
// in the order the weight format's kernel consumes them, so no kernel reshuffles at run time.
//
// The combine order of docs/format.md §8.4 works on eight 16-element groups per block (group
// g = elements 16g .. 16g+15, inside sub-block g / 2). A kernel holds the eight group sums in
// one register of eight int32 lanes, in an order its layout makes cheapest (Q8LaneGroup): int32
// lane L of each of the four 32-byte quarters of qs holds four elements of one group. The block
// keeps each group's scale and −Σq in that lane order, so the kernel loads them as they are.
#ifndef WALSH_KERNELS_Q8_ACTIVATION_H_
#define WALSH_KERNELS_Q8_ACTIVATION_H_

#include <stdint.h>

#include "kernels/host_device.h"

namespace walsh {

inline constexpr int kQ8SubBlock = 32;
inline constexpr int kQ8Groups = 8;  // 16-element groups per 128-element block

enum class Q8Layout {
  kNatural,    // qs[j] = q(j): element order, the reference the other layouts are defined by
  kPq2Planes,  // qs[p*32 + m] = q(4m + p): matches PQ2_0's four 2-bit planes per byte
  kPtq1Lanes,  // qs[32v + 4L + k] = q(16 · Q8LaneGroup(L) + 4v + k): PTQ1_0's code positions
};

struct alignas(64) Q8Block128 {
  float d[kQ8Groups];  // lane L: the fp16-exact scale of group Q8LaneGroup(layout, L)
  // Lane L: −Σ q over that group. Ternary codes are value + 1, so a dot product of codes with q
  // that starts from it sums (code − 1) · q.
  int32_t minus_sum[kQ8Groups];
  int8_t qs[128];
};
static_assert(sizeof(Q8Block128) == 192, "Q8Block128 is three cache lines");

// Quantizes n values (a multiple of 128) into n / 128 blocks.
void QuantizeRowQ8(const float* x, int64_t n, Q8Layout layout, Q8Block128* out);

// The group whose sums sit in int32 lane L of a kernel's register. kNatural and kPq2Planes keep
// groups in order (lane L of a 2-bit plane's int32 words is group L); kPtq1Lanes keeps groups
// [0, 2, 4, 6, 1, 3, 5, 7], so lane L and lane L + 4 hold groups 2L and 2L + 1: the combine's
// first pairwise sums (docs/format.md §8.4) are one add of a register's two 128-bit halves.
WALSH_HD constexpr int Q8LaneGroup(Q8Layout layout, int lane) {
  return layout == Q8Layout::kPtq1Lanes ? (lane < 4 ? 2 * lane : 2 * (lane - 4) + 1) : lane;
}

WALSH_HD constexpr int Q8GroupLane(Q8Layout layout, int group) {
  return layout == Q8Layout::kPtq1Lanes ? (group % 2 == 0 ? group / 2 : 4 + group / 2) : group;
}

// Element index held at position i of a block's qs in `layout`.
WALSH_HD constexpr int Q8ElementAt(Q8Layout layout, int i) {
  switch (layout) {
    case Q8Layout::kNatural:
      return i;
    case Q8Layout::kPq2Planes:
      return 4 * (i & 31) + (i >> 5);
    case Q8Layout::kPtq1Lanes:
      return 16 * Q8LaneGroup(layout, (i >> 2) & 7) + 4 * (i >> 5) + (i & 3);
  }
  return i;
}

}  // namespace walsh

#endif  // WALSH_KERNELS_Q8_ACTIVATION_H_
