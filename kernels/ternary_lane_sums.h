// One lane's integer work in the CUDA mat-vec over the lanes layout
// (kernels/ternary_lanes_layout.h): from the words a lane has loaded, the exact Σ code · q over
// its group g of one block, against the activation block's int32 words. The host runs the same
// functions in tests/unit/kernels/ternary_lanes_layout_test.cc, so the decomposition the GPU
// uses is proven equal to the whole product on the CPU.
#ifndef WALSH_KERNELS_TERNARY_LANE_SUMS_H_
#define WALSH_KERNELS_TERNARY_LANE_SUMS_H_

#include <stdint.h>

#include "kernels/host_device.h"
#include "kernels/ternary_block_decode.h"

namespace walsh {

// Σ of the four signed byte products of a and b, plus c (CUDA's __dp4a).
WALSH_HD int32_t Dp4a(uint32_t a, uint32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int k = 0; k < 4; ++k) {
    c += static_cast<int8_t>(a >> (8 * k)) * static_cast<int8_t>(b >> (8 * k));
  }
  return c;
#endif
}

// PQ2_0: group g's code word (qs[4g .. 4g+3]) holds four 2-bit planes; plane p is elements
// 4m + p of the group's bytes m and meets activation word 8p + g (Q8Layout::kPq2Planes).
WALSH_HD int32_t Pq2LaneSum(uint32_t word, const int32_t* xq, int g) {
  int32_t sum = 0;
  for (int p = 0; p < 4; ++p) {
    sum = Dp4a((word >> (2 * p)) & 0x03030303u, static_cast<uint32_t>(xq[8 * p + g]), sum);
  }
  return sum;
}

// PTQ1_0 digit planes, four bytes at once (kernels/ternary_block_decode.h's DecodeTrit per
// byte): each byte times 3^n keeps, mod 256, the digits from n down; its top digit is then
// (p · 3) >> 8. Even and odd bytes are multiplied apart, in 16-bit halves, so no carry crosses
// a byte that matters: 255 · 81 < 2^16. The low half's bytes (0, 1) take multiplier m_lo, the
// high half's (2, 3) m_hi, so one word can hold two digits of the same two bytes.
WALSH_HD uint32_t Ptq1DigitWord(uint32_t w, uint32_t m_lo, uint32_t m_hi) {
  const uint32_t even = w & 0x00ff00ffu, odd = (w >> 8) & 0x00ff00ffu;
  const uint32_t pe = (((even & 0xffffu) * m_lo) | ((even & 0xffff0000u) * m_hi)) & 0x00ff00ffu;
  const uint32_t po = (((odd & 0xffffu) * m_lo) | ((odd & 0xffff0000u) * m_hi)) & 0x00ff00ffu;
  return (((pe * 3) >> 8) & 0x00030003u) | ((((po * 3) >> 8) & 0x00030003u) << 8);
}

// How lane g finds its PTQ1_0 group's four code words: word v holds elements 16g + 4v .. +3, the
// order of activation word 8v + Q8GroupLane(kPtq1Lanes, g), and is digit plane (m_lo[v],
// m_hi[v]) of a source word (docs/format.md §3):
//   groups 0..4: digit g of qs[0..15] (source lo, words 0..3);
//   groups 5, 6: digits 2(g-5) and 2(g-5)+1 of qs[16..23] (source hi: words 0, 1, 0, 1);
//   group 7:     digit 4 of qs[16..23], then digits 0..3 of the two qh bytes, alternating
//                (source hi, hi, then qh0 qh1 qh0 qh1 twice, two digits per word).
// The plan is fixed per lane, so every lane runs the same instructions: no divergence.
struct Ptq1LanePlan {
  uint32_t m_lo[4], m_hi[4];  // 3^digit for the low and high half of each word
  uint8_t d_lo[4], d_hi[4];   // the digits themselves (the table decode's index)
  bool from_lo, qh_tail;
};

WALSH_HD Ptq1LanePlan Ptq1PlanFor(int g) {
  const uint32_t pow3[5] = {1, 3, 9, 27, 81};
  Ptq1LanePlan plan{};
  plan.from_lo = g < 5;
  plan.qh_tail = g == 7;
  for (int v = 0; v < 4; ++v) {
    int lo, hi;
    if (g < 5) {
      lo = hi = g;
    } else if (g < 7) {
      lo = hi = 2 * (g - 5) + v / 2;
    } else {
      lo = v < 2 ? 4 : 2 * (v - 2);
      hi = v < 2 ? 4 : 2 * (v - 2) + 1;
    }
    plan.d_lo[v] = static_cast<uint8_t>(lo);
    plan.d_hi[v] = static_cast<uint8_t>(hi);
    plan.m_lo[v] = pow3[lo];
    plan.m_hi[v] = pow3[hi];
  }
  return plan;
}

// Code word v (0..3) of the group from the block's word v of qs[0..15] (lo_v), its qs[16..23]
// (hi0, hi1) and qh bytes: what MMA lane v holds of the group (kernels/ternary_mma_tile.h).
// The word whose digit plane is code word v.
WALSH_HD uint32_t Ptq1SourceWord(const Ptq1LanePlan& plan, int v, uint32_t lo_v, uint32_t hi0,
                                 uint32_t hi1, uint32_t qh) {
  const uint32_t q = (qh & 0xffffu) | (qh & 0xffffu) << 16;  // qh0 qh1 qh0 qh1
  const uint32_t hi = (v & 1) ? hi1 : hi0;
  return plan.from_lo ? lo_v : (v >= 2 && plan.qh_tail) ? q : hi;
}

WALSH_HD uint32_t Ptq1CodeWord(const Ptq1LanePlan& plan, int v, uint32_t lo_v, uint32_t hi0,
                               uint32_t hi1, uint32_t qh) {
  return Ptq1DigitWord(Ptq1SourceWord(plan, v, lo_v, hi0, hi1, qh), plan.m_lo[v], plan.m_hi[v]);
}

// The byte → trit table the table decode reads (in shared memory on the device): entry
// [n][b] is DecodeTrit(b, n). Ptq1DigitWordFromTable equals Ptq1DigitWord for every input
// (ternary_lanes_layout_test.cc); the GPU check's sweep times both.
inline constexpr int kPtq1TritTableBytes = 5 * 256;
WALSH_HD void FillPtq1TritTable(uint8_t* table, int first, int stride) {
  for (int i = first; i < kPtq1TritTableBytes; i += stride) {
    table[i] = static_cast<uint8_t>(DecodeTrit(static_cast<uint8_t>(i & 255), i >> 8));
  }
}

WALSH_HD uint32_t Ptq1DigitWordFromTable(const uint8_t* table, uint32_t w, int d_lo, int d_hi) {
  const uint8_t* lo = table + 256 * d_lo;
  const uint8_t* hi = table + 256 * d_hi;
  return static_cast<uint32_t>(lo[w & 0xff]) | static_cast<uint32_t>(lo[(w >> 8) & 0xff]) << 8 |
         static_cast<uint32_t>(hi[(w >> 16) & 0xff]) << 16 |
         static_cast<uint32_t>(hi[w >> 24]) << 24;
}

// Code word v as Ptq1CodeWord, decoded through the table.
WALSH_HD uint32_t Ptq1CodeWordFromTable(const uint8_t* table, const Ptq1LanePlan& plan, int v,
                                        uint32_t lo_v, uint32_t hi0, uint32_t hi1, uint32_t qh) {
  return Ptq1DigitWordFromTable(table, Ptq1SourceWord(plan, v, lo_v, hi0, hi1, qh), plan.d_lo[v],
                                plan.d_hi[v]);
}

// The group's four code words from the block's qs[0..15] (lo), qs[16..23] (hi) and qh bytes.
WALSH_HD void Ptq1GroupCodes(const Ptq1LanePlan& plan, const uint32_t lo[4], const uint32_t hi[2],
                             uint32_t qh, uint32_t codes[4]) {
  for (int v = 0; v < 4; ++v) codes[v] = Ptq1CodeWord(plan, v, lo[v], hi[0], hi[1], qh);
}

// Σ code · q over a PTQ1_0 group from its code words, against activation words 8v + lane.
WALSH_HD int32_t Ptq1LaneSum(const uint32_t codes[4], const int32_t* xq, int lane) {
  int32_t sum = 0;
  for (int v = 0; v < 4; ++v) sum = Dp4a(codes[v], static_cast<uint32_t>(xq[8 * v + lane]), sum);
  return sum;
}

}  // namespace walsh

#endif  // WALSH_KERNELS_TERNARY_LANE_SUMS_H_
