// A packed ternary matrix as every backend sees it: rows of 128-weight blocks in one format,
// stored exactly as in the file (PQ2_0 at 2.125, PTQ1_0 at 1.75 bits per weight).
#ifndef WALSH_KERNELS_TERNARY_WEIGHTS_H_
#define WALSH_KERNELS_TERNARY_WEIGHTS_H_

#include <stdint.h>

#include "kernels/weight_format.h"

namespace walsh {

struct TernaryWeights {
  TernaryFormat format = TernaryFormat::kPq2_0;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;  // a multiple of 128

  int64_t blocks_per_row() const { return cols / 128; }
  int64_t row_bytes() const { return blocks_per_row() * FormatTraits(format).block_bytes; }
  int64_t bytes() const { return rows * row_bytes(); }
};

}  // namespace walsh

#endif  // WALSH_KERNELS_TERNARY_WEIGHTS_H_
