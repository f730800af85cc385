// Reference ("obviously correct") codecs for the PQ2_0 and PTQ1_0 block formats.
// Every faster path in kernels/ must reproduce these bit for bit.
#ifndef WALSH_KERNELS_TERNARY_CODEC_REF_H_
#define WALSH_KERNELS_TERNARY_CODEC_REF_H_

#include <cstddef>
#include <cstdint>

#include "kernels/block_types.h"

namespace walsh {

// Codes are ternary digits 0, 1, 2 meaning -1, 0, +1 (PQ2_0 also admits 3 meaning +2).

// Packs 128 codes (each 0..3) and an fp16 scale into a PQ2_0 block.
void PackBlockPq2_0(const uint8_t* codes, uint16_t d_fp16, block_pq2_0* out);
// Unpacks the 128 codes of a PQ2_0 block.
void UnpackBlockPq2_0(const block_pq2_0& block, uint8_t* codes);

// Packs 128 trits (each 0..2) and an fp16 scale into a PTQ1_0 block.
void PackBlockPtq1_0(const uint8_t* trits, uint16_t d_fp16, block_ptq1_0* out);
// Unpacks the 128 trits of a PTQ1_0 block in element order.
void UnpackBlockPtq1_0(const block_ptq1_0& block, uint8_t* trits);

// Row helpers: `n` must be a multiple of 128; `blocks` holds n / 128 blocks.
void DequantizeRowPq2_0Ref(const block_pq2_0* blocks, float* out, int64_t n);
void DequantizeRowPtq1_0Ref(const block_ptq1_0* blocks, float* out, int64_t n);

// Reference quantizers: d = max|x| per block, code = round-half-away(x / d) + 1, clamped
// to the format's code range (0..3 for PQ2_0, 0..2 for PTQ1_0); d = 0 gives all-zero codes.
void QuantizeRowPq2_0Ref(const float* x, block_pq2_0* blocks, int64_t n);
void QuantizeRowPtq1_0Ref(const float* x, block_ptq1_0* blocks, int64_t n);

}  // namespace walsh

#endif  // WALSH_KERNELS_TERNARY_CODEC_REF_H_
