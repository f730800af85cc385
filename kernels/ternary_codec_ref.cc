#include "kernels/ternary_codec_ref.h"

#include <algorithm>
#include <cmath>

#include "kernels/float_convert.h"

namespace walsh {
namespace {

constexpr int kBlock = kTernaryBlockElems;
constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};

// Byte b holds digits t0..t4 (t0 most significant) as ceil(q * 256 / 243).
uint8_t EncodeTritByte(uint32_t q) { return static_cast<uint8_t>((q * 256 + 242) / 243); }

uint8_t DecodeTrit(uint8_t b, int n) {
  const uint8_t p = static_cast<uint8_t>(b * kPow3[n]);  // 8-bit wrap drops the higher digits
  return static_cast<uint8_t>((static_cast<uint16_t>(p) * 3) >> 8);
}

// Element index of digit n of byte m in a PTQ1_0 block (docs/format.md §3 staged order).
int Ptq1QsElement(int m, int n) { return m < 16 ? n * 16 + m : 80 + n * 8 + (m - 16); }
int Ptq1QhElement(int j, int n) { return 120 + n * 2 + j; }

float BlockAbsMax(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

// Quantizes one block to codes in [0, max_code]; returns the fp16 scale.
uint16_t QuantizeBlockCodes(const float* x, int max_code, uint8_t* codes) {
  const float d = BlockAbsMax(x);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    const int c = static_cast<int>(std::round(x[j] * id)) + 1;  // round: half away from zero
    codes[j] = static_cast<uint8_t>(std::clamp(c, 0, max_code));
  }
  return FloatToFp16(d);
}

}  // namespace

void PackBlockPq2_0(const uint8_t* codes, uint16_t d_fp16, block_pq2_0* out) {
  out->d = d_fp16;
  for (int m = 0; m < 32; ++m) {
    out->qs[m] = static_cast<uint8_t>((codes[4 * m] & 3) | (codes[4 * m + 1] & 3) << 2 |
                                      (codes[4 * m + 2] & 3) << 4 | (codes[4 * m + 3] & 3) << 6);
  }
}

void UnpackBlockPq2_0(const block_pq2_0& block, uint8_t* codes) {
  for (int j = 0; j < kBlock; ++j) codes[j] = (block.qs[j >> 2] >> (2 * (j & 3))) & 3;
}

void PackBlockPtq1_0(const uint8_t* trits, uint16_t d_fp16, block_ptq1_0* out) {
  for (int m = 0; m < 24; ++m) {
    uint32_t q = 0;
    for (int n = 0; n < 5; ++n) q = q * 3 + trits[Ptq1QsElement(m, n)];
    out->qs[m] = EncodeTritByte(q);
  }
  for (int j = 0; j < 2; ++j) {
    uint32_t q = 0;
    for (int n = 0; n < 4; ++n) q = q * 3 + trits[Ptq1QhElement(j, n)];
    out->qh[j] = EncodeTritByte(q * 3);
  }
  out->d = d_fp16;
}

void UnpackBlockPtq1_0(const block_ptq1_0& block, uint8_t* trits) {
  for (int m = 0; m < 24; ++m) {
    for (int n = 0; n < 5; ++n) trits[Ptq1QsElement(m, n)] = DecodeTrit(block.qs[m], n);
  }
  for (int j = 0; j < 2; ++j) {
    for (int n = 0; n < 4; ++n) trits[Ptq1QhElement(j, n)] = DecodeTrit(block.qh[j], n);
  }
}

void DequantizeRowPq2_0Ref(const block_pq2_0* blocks, float* out, int64_t n) {
  uint8_t codes[kBlock];
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float d = Fp16ToFloat(blocks[b].d);
    UnpackBlockPq2_0(blocks[b], codes);
    for (int j = 0; j < kBlock; ++j) out[b * kBlock + j] = static_cast<float>(codes[j] - 1) * d;
  }
}

void DequantizeRowPtq1_0Ref(const block_ptq1_0* blocks, float* out, int64_t n) {
  uint8_t trits[kBlock];
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float d = Fp16ToFloat(blocks[b].d);
    UnpackBlockPtq1_0(blocks[b], trits);
    for (int j = 0; j < kBlock; ++j) out[b * kBlock + j] = static_cast<float>(trits[j] - 1) * d;
  }
}

void QuantizeRowPq2_0Ref(const float* x, block_pq2_0* blocks, int64_t n) {
  uint8_t codes[kBlock];
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const uint16_t d = QuantizeBlockCodes(x + b * kBlock, 3, codes);
    PackBlockPq2_0(codes, d, &blocks[b]);
  }
}

void QuantizeRowPtq1_0Ref(const float* x, block_ptq1_0* blocks, int64_t n) {
  uint8_t trits[kBlock];
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const uint16_t d = QuantizeBlockCodes(x + b * kBlock, 2, trits);
    PackBlockPtq1_0(trits, d, &blocks[b]);
  }
}

}  // namespace walsh
