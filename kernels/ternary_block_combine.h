// The one float step every ternary kernel path shares (CPU ISAs and CUDA), so all paths round
// identically.
#ifndef WALSH_KERNELS_TERNARY_BLOCK_COMBINE_H_
#define WALSH_KERNELS_TERNARY_BLOCK_COMBINE_H_

#include <stdint.h>

#include "kernels/host_device.h"

namespace walsh {

// (p0 + p1) + (p2 + p3) with p_s = float(isum_s) * d_s.
WALSH_HD float CombineSubBlocks(const int32_t isum[4], const float d[4]) {
  const float p0 = static_cast<float>(isum[0]) * d[0];
  const float p1 = static_cast<float>(isum[1]) * d[1];
  const float p2 = static_cast<float>(isum[2]) * d[2];
  const float p3 = static_cast<float>(isum[3]) * d[3];
  return (p0 + p1) + (p2 + p3);
}

}  // namespace walsh

#endif  // WALSH_KERNELS_TERNARY_BLOCK_COMBINE_H_
