// A packed ternary matrix as every backend sees it: rows of 128-weight blocks in one format
// (PQ2_0 at 2.125, PTQ1_0 at 1.75 bits per weight), each row stored as in the file or, on the
// CUDA backend, repacked in place at upload into the lanes layout
// (kernels/ternary_lanes_layout.h): the same bytes of each row in another order.
#ifndef WALSH_KERNELS_TERNARY_WEIGHTS_H_
#define WALSH_KERNELS_TERNARY_WEIGHTS_H_

#include <stdint.h>

#include "kernels/weight_format.h"

namespace walsh {

enum class TernaryLayout : uint8_t { kFile, kLanes };

struct TernaryWeights {
  TernaryFormat format = TernaryFormat::kPq2_0;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;                             // a multiple of 128
  TernaryLayout layout = TernaryLayout::kFile;  // only the CUDA backend sets kLanes

  int64_t blocks_per_row() const { return cols / 128; }
  int64_t row_bytes() const { return blocks_per_row() * FormatTraits(format).block_bytes; }
  int64_t bytes() const { return rows * row_bytes(); }
};

}  // namespace walsh

#endif  // WALSH_KERNELS_TERNARY_WEIGHTS_H_
