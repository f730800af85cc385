// The vision encoder's float ops (docs/vision.md §3), written once for the host and CUDA
// devices: the linear layers' lane order, LayerNorm, the 2D rotary turn and the two GELUs, and
// the one count both sides of the position taps agree on. The CPU encoder and the CUDA kernels
// (kernels/cuda/vision.cu) both call these, so an image's rows are the same bits on either.
#ifndef WALSH_KERNELS_VISION_NUMERICS_H_
#define WALSH_KERNELS_VISION_NUMERICS_H_

#include <math.h>
#include <stdint.h>

#include "kernels/host_device.h"
#include "kernels/numerics.h"

namespace walsh {

// A linear layer's output sums its terms in 8 lanes: lane l takes the terms k ≡ l mod 8 below the
// last whole chunk of 8, in order; the tail's terms go to lanes 0, 1, ... in turn; then the lanes
// combine in this fixed pairwise order, and the bias is added last.
inline constexpr int kF32MatMulLanes = 8;

WALSH_HD float CombineF32MatMulLanes(const float a[kF32MatMulLanes]) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// A patch's learned position embedding: 4 taps of the table, bilinear (docs/vision.md §3.3).
inline constexpr int kPositionTaps = 4;

// LayerNorm of one row: the mean and the variance each summed in index order, then
// y[k] = (x[k] - mean) · inv · w[k] + b[k].
struct LayerNormStats {
  float mean, inv;
};

WALSH_HD LayerNormStats LayerNormRowStats(const float* x, int64_t d, float eps) {
  float mean = 0.0f;
  for (int64_t k = 0; k < d; ++k) mean += x[k];
  mean /= static_cast<float>(d);
  float var = 0.0f;
  for (int64_t k = 0; k < d; ++k) var += (x[k] - mean) * (x[k] - mean);
  return {mean, 1.0f / sqrtf(var / static_cast<float>(d) + eps)};
}

WALSH_HD float LayerNormValue(float x, LayerNormStats s, float w, float b) {
  return (x - s.mean) * s.inv * w + b;
}

// Pair (j, j + half) of one head turned by the angle whose cosine and sine are cs[j], sn[j].
WALSH_HD void Rope2dHead(float* v, const float* cs, const float* sn, int64_t half) {
  for (int64_t j = 0; j < half; ++j) {
    const float a = v[j], b = v[j + half];
    v[j] = a * cs[j] - b * sn[j];
    v[j + half] = b * cs[j] + a * sn[j];
  }
}

// The blocks' MLP (tanh form) and the merger's (erf form), with walsh's own tanh and erf
// (kernels/numerics.h), so neither depends on a C library.
WALSH_HD float GeluTanh(float x) {
  const float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + TanhF(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

WALSH_HD float GeluErf(float x) { return 0.5f * x * (1.0f + ErfF(x * 0.7071067811865476f)); }

}  // namespace walsh

#endif  // WALSH_KERNELS_VISION_NUMERICS_H_
