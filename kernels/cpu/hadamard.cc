#include "kernels/cpu/hadamard.h"

#include "kernels/cpu/isa.h"
#include "kernels/hadamard_ref.h"

namespace walsh {
namespace {

void Blocks(CpuIsa isa, float* v, int64_t n, int64_t block) {
#if WALSH_X86_KERNELS
  if (isa != CpuIsa::kScalar && block >= 8) {
    FwhtBlocksAvx2(v, n, block);
    return;
  }
#else
  (void)isa;
#endif
  for (int64_t b = 0; b < n; b += block) FwhtBlockRef(v + b, block);
}

}  // namespace

void SignedFwhtForward(CpuIsa isa, const float* x, const int8_t* signs, int64_t n, int64_t block,
                       float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = signs != nullptr && signs[i] < 0 ? -x[i] : x[i];
  Blocks(isa, out, n, block);
}

void SignedFwhtInverse(CpuIsa isa, const float* x, const int8_t* signs, int64_t n, int64_t block,
                       float* out) {
  if (out != x) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i];
  }
  Blocks(isa, out, n, block);
  if (signs != nullptr) {
    for (int64_t i = 0; i < n; ++i) out[i] = signs[i] < 0 ? -out[i] : out[i];
  }
}

}  // namespace walsh
