#include "kernels/q8_activation.h"

#include "kernels/token_ops.h"

namespace walsh {

void QuantizeRowQ8(const float* x, int64_t n, Q8Layout layout, Q8Block128* out) {
  for (int64_t b = 0; b < n / 128; ++b) QuantizeBlockQ8(x + b * 128, layout, &out[b]);
}

}  // namespace walsh
