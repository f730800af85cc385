// The float steps every ternary kernel path shares (the CPU ISAs and CUDA), so all paths round
// identically (docs/format.md §8.4, "Combine order"). A row's product for one token over a
// window of blocks keeps eight fp32 accumulators, one per 16-element group g of a block:
//   acc_g = fma(float(isum_{b,g}), dw_b · dx_{b,g}, acc_g)   for the window's blocks b in order,
// where isum_{b,g} is the exact integer Σ (code − 1) · q over group g of block b, dw_b the
// block's weight scale and dx_{b,g} the scale of the activation sub-block holding group g
// (dw_b · dx_{b,g} is exact: two fp16 values). The window's result is
//   ((acc_0 + acc_1) + (acc_2 + acc_3)) + ((acc_4 + acc_5) + (acc_6 + acc_7)).
// Eight independent chains let an AVX2 register, or eight GPU lanes, carry a row without a
// horizontal sum per block.
#ifndef WALSH_KERNELS_TERNARY_BLOCK_COMBINE_H_
#define WALSH_KERNELS_TERNARY_BLOCK_COMBINE_H_

#include <math.h>
#include <stdint.h>

#include "kernels/host_device.h"
#include "kernels/q8_activation.h"

namespace walsh {

// One block's step of group g's accumulator.
WALSH_HD float AccumulateGroup(float acc, int32_t isum, float dw, float dx) {
  return fmaf(static_cast<float>(isum), dw * dx, acc);
}

// The window's result from the eight group accumulators (indexed by group).
WALSH_HD float JoinGroups(const float acc[kQ8Groups]) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace walsh

#endif  // WALSH_KERNELS_TERNARY_BLOCK_COMBINE_H_
