#include "kernels/q8_activation.h"

#include <algorithm>
#include <cmath>

#include "kernels/float_convert.h"

namespace walsh {

void QuantizeRowQ8(const float* x, int64_t n, Q8Layout layout, Q8Block128* out) {
  for (int64_t b = 0; b < n / 128; ++b) {
    const float* xb = x + b * 128;
    Q8Block128& blk = out[b];
    int8_t q[128];
    for (int s = 0; s < 4; ++s) {
      float amax = 0.0f;
      for (int j = 0; j < kQ8SubBlock; ++j) amax = std::max(amax, std::fabs(xb[s * 32 + j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      blk.d[s] = Fp16ToFloat(FloatToFp16(d));
      int32_t sum = 0;
      for (int j = 0; j < kQ8SubBlock; ++j) {
        const int v = static_cast<int>(std::round(xb[s * 32 + j] * id));
        q[s * 32 + j] = static_cast<int8_t>(std::clamp(v, -127, 127));
        sum += q[s * 32 + j];
      }
      blk.sum[s] = sum;
    }
    for (int i = 0; i < 128; ++i) blk.qs[i] = q[Q8ElementAt(layout, i)];
  }
}

}  // namespace walsh
