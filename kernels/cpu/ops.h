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

// GdnHeadStep (kernels/token_ops.h) bit for bit, faster on a CPU: each row's sums run in the
// same order, but eight rows at a time, so eight dependency chains overlap instead of one.
void GdnHeadStepInterleaved(const GdnLayerParams& p, const float* u, const float* z,
                            const float* alpha_raw, const float* beta_raw, int64_t h, float* S,
                            float* out);

// y[i] = DenseRowDot(format, w, rows[i], cols, x) for i < n, bit for bit, eight rows at a time.
void DenseRowsDot(DenseFormat format, const void* w, const int64_t* rows, int64_t n, int64_t cols,
                  const float* x, float* y);

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_OPS_H_
