// The decode rule of one packed ternary block, for the host and CUDA devices alike
// (docs/format.md §2, §3): codes 0, 1, 2 (PQ2_0 also 3) mean (code - 1) · d.
#ifndef WALSH_KERNELS_TERNARY_BLOCK_DECODE_H_
#define WALSH_KERNELS_TERNARY_BLOCK_DECODE_H_

#include <stdint.h>

#include "kernels/block_types.h"
#include "kernels/float_convert.h"
#include "kernels/host_device.h"
#include "kernels/weight_format.h"

namespace walsh {

// Digit n (0 = most significant) of a PTQ1_0 byte holding ceil(q · 256 / 243): multiplying
// by 3^n wraps away the higher digits in 8 bits, then the top digit is (p · 3) >> 8.
// (3^n as a chain of selects, not a table: a table indexed at run time lands in a GPU
// kernel's local memory.)
WALSH_HD int DecodeTrit(uint8_t b, int n) {
  const int pow3 = n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81;
  const uint8_t p = static_cast<uint8_t>(b * pow3);
  return (static_cast<int>(p) * 3) >> 8;
}

// Code of element j (0..127) of a PQ2_0 block: bits 2·(j & 3) of qs[j >> 2].
WALSH_HD int Pq2Code(const block_pq2_0& b, int j) { return (b.qs[j >> 2] >> (2 * (j & 3))) & 3; }

// Where element j of a PTQ1_0 block lives: digit `digit` of the block's byte `byte` (qs are
// bytes 0..23, qh 24 and 25). In its staged order, elements 0..79 are digit j/16 of byte j%16,
// 80..119 digit (j-80)/8 of byte 16 + (j-80)%8, 120..127 digit (j-120)/2 of qh[j%2].
struct Ptq1TritPlace {
  int byte, digit;
};

WALSH_HD constexpr Ptq1TritPlace Ptq1TritAt(int j) {
  if (j < 80) return {j % 16, j / 16};
  if (j < 120) return {16 + (j - 80) % 8, (j - 80) / 8};
  return {24 + (j - 120) % 2, (j - 120) / 2};
}

// Trit of element j of a PTQ1_0 block.
WALSH_HD int Ptq1Trit(const block_ptq1_0& b, int j) {
  const Ptq1TritPlace at = Ptq1TritAt(j);
  return DecodeTrit(at.byte < 24 ? b.qs[at.byte] : b.qh[at.byte - 24], at.digit);
}

// The 128 codes of block `b` of a packed row in element order; returns the block's scale.
WALSH_HD float DecodeTernaryBlock(TernaryFormat format, const uint8_t* row, int64_t b,
                                  uint8_t* codes) {
  switch (format) {
    case TernaryFormat::kPq2_0: {
      const block_pq2_0& blk = reinterpret_cast<const block_pq2_0*>(row)[b];
      for (int j = 0; j < kTernaryBlockElems; ++j) codes[j] = static_cast<uint8_t>(Pq2Code(blk, j));
      return Fp16ToFloat(blk.d);
    }
    case TernaryFormat::kPtq1_0: {
      const block_ptq1_0& blk = reinterpret_cast<const block_ptq1_0*>(row)[b];
      for (int j = 0; j < kTernaryBlockElems; ++j) {
        codes[j] = static_cast<uint8_t>(Ptq1Trit(blk, j));
      }
      return Fp16ToFloat(blk.d);
    }
  }
  return 0.0f;
}

// One dequantized weight: element j of block b of a packed row.
WALSH_HD float DequantizeTernary(TernaryFormat format, const uint8_t* row, int64_t b, int j) {
  switch (format) {
    case TernaryFormat::kPq2_0: {
      const block_pq2_0& blk = reinterpret_cast<const block_pq2_0*>(row)[b];
      return static_cast<float>(Pq2Code(blk, j) - 1) * Fp16ToFloat(blk.d);
    }
    case TernaryFormat::kPtq1_0: {
      const block_ptq1_0& blk = reinterpret_cast<const block_ptq1_0*>(row)[b];
      return static_cast<float>(Ptq1Trit(blk, j) - 1) * Fp16ToFloat(blk.d);
    }
  }
  return 0.0f;
}

}  // namespace walsh

#endif  // WALSH_KERNELS_TERNARY_BLOCK_DECODE_H_
