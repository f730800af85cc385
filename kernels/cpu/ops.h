// The CPU's loops over the shared per-token ops (kernels/token_ops.h), and the few ops that
// only the host runs.
#ifndef WALSH_KERNELS_CPU_OPS_H_
#define WALSH_KERNELS_CPU_OPS_H_

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/token_ops.h"

namespace walsh {

// out[i] = silu(gate[i]) * up[i]; the same bits on the ISA's path (AVX2: eight lanes at once).
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);
void SwiGluFast(CpuIsa isa, const float* gate, const float* up, int64_t n, float* out);
void SwiGluAvx2(const float* gate, const float* up, int64_t n, float* out);

// QuantizeRowQ8 (kernels/q8_activation.h) bit for bit on the ISA's path (AVX2: eight lanes).
void QuantizeRowQ8Fast(CpuIsa isa, const float* x, int64_t n, Q8Layout layout, Q8Block128* out);
void QuantizeRowQ8Avx2(const float* x, int64_t n, Q8Layout layout, Q8Block128* out);

int64_t Argmax(const float* x, int64_t n);  // lowest index on ties

// GdnHeadStep (kernels/token_ops.h) bit for bit on the ISA's path: AVX2 runs each row's 32
// sum lanes as four vectors (false where hd is not a multiple of 32); elsewhere the shared code,
// whose lanes the compiler runs side by side.
void GdnHeadStepFast(CpuIsa isa, const GdnLayerParams& p, const float* u, const float* z,
                     const float* alpha_raw, const float* beta_raw, int64_t h, float* S,
                     float* out);
bool GdnHeadStepAvx2(const GdnLayerParams& p, const float* u, const float* z,
                     const float* alpha_raw, const float* beta_raw, int64_t h, float* S,
                     float* out);

// AttendOneHead (kernels/token_ops.h) bit for bit, faster on a CPU, on the ISA's path: eight
// keys' scores at a time (eight dot-product chains overlap, or eight lanes after a transpose),
// and the weighted values key by key across the head's dimensions, each dimension still
// summing its keys in position order. T: float or uint16_t (fp16).
template <typename T>
void AttendOneHeadFast(CpuIsa isa, const float* q, int64_t head_dim, const PagedKv<T>& kv,
                       int64_t n_keys, float scale, float* scores, float* out);
// Its portable path, and the AVX2 one (false where head_dim is not a multiple of 8).
template <typename T>
void AttendOneHeadInterleaved(const float* q, int64_t head_dim, const PagedKv<T>& kv,
                              int64_t n_keys, float scale, float* scores, float* out);
template <typename T>
bool AttendOneHeadAvx2(const float* q, int64_t head_dim, const PagedKv<T>& kv, int64_t n_keys,
                       float scale, float* scores, float* out);

// y[i] = DenseRowDot(format, w, rows[i], cols, x) for i < n.
void DenseRowsDot(DenseFormat format, const void* w, const int64_t* rows, int64_t n, int64_t cols,
                  const float* x, float* y);

// The same for eight tokens at once (token t's input at x + t · x_stride, its outputs at
// y + t · y_stride): y[t · y_stride + i] = DenseRowDot(format, w, rows[i], cols, x_t), each
// row's 32 lanes as four AVX2 vectors, the row read once for the eight. Only where
// HasDenseRowsDot8Tokens(isa) (it needs AVX2); cols a multiple of 32 (otherwise the shared
// code runs).
inline bool HasDenseRowsDot8Tokens(CpuIsa isa) {
  return WALSH_X86_KERNELS && isa != CpuIsa::kScalar;
}
void DenseRowsDot8Tokens(CpuIsa isa, DenseFormat format, const void* w, const int64_t* rows,
                         int64_t n_rows, int64_t cols, const float* x, int64_t x_stride, float* y,
                         int64_t y_stride);
void DenseRowsDot8TokensAvx2(DenseFormat format, const void* w, const int64_t* rows, int64_t n_rows,
                             int64_t cols, const float* x, int64_t x_stride, float* y,
                             int64_t y_stride);

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_OPS_H_
