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
#include "kernels/q8_activation.h"
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

// `tokens` rows of `blocks` int8 activation blocks of normal random values, in the layout the
// format's kernels read.
inline std::vector<Q8Block128> RandomQ8Activations(TernaryFormat format, int64_t tokens,
                                                   int64_t blocks, std::mt19937& gen) {
  std::normal_distribution<float> dist;
  std::vector<float> x(blocks * 128);
  std::vector<Q8Block128> q(tokens * blocks);
  for (int64_t t = 0; t < tokens; ++t) {
    for (float& v : x) v = dist(gen);
    QuantizeRowQ8(x.data(), blocks * 128, Q8LayoutFor(format), &q[t * blocks]);
  }
  return q;
}

inline uint32_t WordAt(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

}  // namespace walsh

#endif  // WALSH_TESTS_UNIT_KERNELS_RANDOM_TERNARY_ROWS_H_
