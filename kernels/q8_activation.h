// Activations quantized to int8 for the integer ternary dot products, as llama.cpp does for
// these weight types: Q8_0 numerics (blocks of 32 values, scale = max|x| / 127 rounded to
// fp16, q = round(x / scale)), grouped four to a 128-weight block. The int8 values are stored
// in the order the weight format's kernel consumes them, so no kernel reshuffles at run time.
#ifndef WALSH_KERNELS_Q8_ACTIVATION_H_
#define WALSH_KERNELS_Q8_ACTIVATION_H_

#include <stdint.h>

#include "kernels/host_device.h"

namespace walsh {

inline constexpr int kQ8SubBlock = 32;

enum class Q8Layout {
  kNatural,    // qs[j] = q(j): PTQ1_0, whose kernels decode trits in element order
  kPq2Planes,  // qs[p*32 + m] = q(4m + p): matches PQ2_0's four 2-bit planes per byte
};

struct Q8Block128 {
  float d[4];      // scales of elements [32s, 32s+32), fp16-exact values
  int32_t sum[4];  // Σ q over each sub-block (PQ2_0 codes are value + 1)
  int8_t qs[128];
};

// Quantizes n values (a multiple of 128) into n / 128 blocks.
void QuantizeRowQ8(const float* x, int64_t n, Q8Layout layout, Q8Block128* out);

// Element index held at position i of a block's qs in `layout`.
WALSH_HD int Q8ElementAt(Q8Layout layout, int i) {
  return layout == Q8Layout::kNatural ? i : 4 * (i & 31) + (i >> 5);
}

}  // namespace walsh

#endif  // WALSH_KERNELS_Q8_ACTIVATION_H_
