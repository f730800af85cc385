// Test inputs for the ternary kernels' decompositions: random packed rows of either format, and
// a little-endian word read from bytes.
#ifndef WALSH_TESTS_UNIT_KERNELS_RANDOM_TERNARY_ROWS_H_
#define WALSH_TESTS_UNIT_KERNELS_RANDOM_TERNARY_ROWS_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/block_types.h"
#include "kernels/float_convert.h"
#include "kernels/ternary_codec_ref.h"
#include "kernels/weight_format.h"

namespace walsh {

// rows × cols weights (cols a multiple of 128): codes 0..2 and small positive fp16 scales.
inline std::vector<uint8_t> RandomTernaryRows(TernaryFormat format, int64_t rows, int64_t cols,
                                              std::mt19937& gen) {
  const int64_t bb = FormatTraits(format).block_bytes;
  std::vector<uint8_t> out(rows * cols / 128 * bb);
  uint8_t codes[128];
  for (int64_t b = 0; b < rows * cols / 128; ++b) {
    for (uint8_t& c : codes) c = gen() % 3;
    const uint16_t d = FloatToFp16(0.01f + (gen() % 100) * 1e-4f);
    if (format == TernaryFormat::kPq2_0) {
      PackBlockPq2_0(codes, d, reinterpret_cast<block_pq2_0*>(out.data()) + b);
    } else {
      PackBlockPtq1_0(codes, d, reinterpret_cast<block_ptq1_0*>(out.data()) + b);
    }
  }
  return out;
}

inline uint32_t WordAt(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

}  // namespace walsh

#endif  // WALSH_TESTS_UNIT_KERNELS_RANDOM_TERNARY_ROWS_H_
