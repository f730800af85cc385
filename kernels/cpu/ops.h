// The CPU's loops over the shared per-token ops (kernels/token_ops.h), and the few ops that
// only the host runs.
#ifndef WALSH_KERNELS_CPU_OPS_H_
#define WALSH_KERNELS_CPU_OPS_H_

#include <cstdint>

#include "kernels/token_ops.h"

namespace walsh {

// out[i] = silu(gate[i]) * up[i].
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

int64_t Argmax(const float* x, int64_t n);  // lowest index on ties

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_OPS_H_
