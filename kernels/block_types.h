// Packed weight blocks of the Prism ternary formats, shared by C++ and CUDA code.
// docs/format.md §2 (PQ2_0) and §3 (PTQ1_0) are the byte-level specification.
#ifndef WALSH_KERNELS_BLOCK_TYPES_H_
#define WALSH_KERNELS_BLOCK_TYPES_H_

#include <stdint.h>

namespace walsh {

inline constexpr int kTernaryBlockElems = 128;

// PQ2_0 (ggml type 142): 2.125 bits per weight. Scale first, then 2-bit codes in
// sequential order: element j is bits 2*(j&3) of qs[j>>2]; value = (code - 1) * d.
struct block_pq2_0 {
  uint16_t d;      // fp16 scale
  uint8_t qs[32];  // 128 2-bit codes
};
static_assert(sizeof(block_pq2_0) == 34, "PQ2_0 block must be 34 bytes");

// PTQ1_0 (ggml type 143): 1.75 bits per weight. Base-3 digits packed 5 per byte
// (4 in qh), staged element order (docs/format.md §3), scale last; value = (trit - 1) * d.
struct block_ptq1_0 {
  uint8_t qs[24];  // 120 trits, 5 per byte
  uint8_t qh[2];   // 8 trits, 4 per byte
  uint16_t d;      // fp16 scale
};
static_assert(sizeof(block_ptq1_0) == 28, "PTQ1_0 block must be 28 bytes");

}  // namespace walsh

#endif  // WALSH_KERNELS_BLOCK_TYPES_H_
