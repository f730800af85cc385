#include "kernels/cpu/ops.h"

#include <algorithm>

namespace walsh {

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

void SwiGluFast(CpuIsa isa, const float* gate, const float* up, int64_t n, float* out) {
#if WALSH_X86_KERNELS
  if (isa != CpuIsa::kScalar) return SwiGluAvx2(gate, up, n, out);
#else
  (void)isa;
#endif
  SwiGlu(gate, up, n, out);
}

void QuantizeRowQ8Fast(CpuIsa isa, const float* x, int64_t n, Q8Layout layout, Q8Block128* out) {
#if WALSH_X86_KERNELS
  if (isa != CpuIsa::kScalar) return QuantizeRowQ8Avx2(x, n, layout, out);
#else
  (void)isa;
#endif
  QuantizeRowQ8(x, n, layout, out);
}

int64_t Argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

namespace {

constexpr int kChains = 8;

}  // namespace

void GdnHeadStepFast(CpuIsa isa, const GdnLayerParams& p, const float* u, const float* z,
                     const float* alpha_raw, const float* beta_raw, int64_t h, float* S,
                     float* out) {
#if WALSH_X86_KERNELS
  if (isa != CpuIsa::kScalar && GdnHeadStepAvx2(p, u, z, alpha_raw, beta_raw, h, S, out)) return;
#else
  (void)isa;
#endif
  GdnHeadStep(p, u, z, alpha_raw, beta_raw, h, S, out);
}

template <typename T>
void AttendOneHeadInterleaved(const float* q, int64_t head_dim, const PagedKv<T>& kv,
                              int64_t n_keys, float scale, float* scores, float* out) {
  for (int64_t t0 = 0; t0 < n_keys; t0 += kChains) {
    const int n = static_cast<int>(std::min<int64_t>(kChains, n_keys - t0));
    const T* k[kChains];
    float dot[kChains] = {};
    for (int r = 0; r < n; ++r) k[r] = PagedRow(kv.k_base, kv, t0 + r);
    for (int64_t i = 0; i < head_dim; ++i) {
      for (int r = 0; r < n; ++r) dot[r] += q[i] * KvLoadAt(k[r], i);
    }
    for (int r = 0; r < n; ++r) scores[t0 + r] = dot[r] * scale;
  }
  const float sum = SoftmaxNumerators(scores, n_keys);
  for (int64_t i = 0; i < head_dim; ++i) out[i] = 0.0f;
  for (int64_t t = 0; t < n_keys; ++t) {
    const float weight = scores[t] / sum;
    const T* v = PagedRow(kv.v_base, kv, t);
    for (int64_t i = 0; i < head_dim; ++i) out[i] += weight * KvLoadAt(v, i);
  }
}

template <typename T>
void AttendOneHeadFast(CpuIsa isa, const float* q, int64_t head_dim, const PagedKv<T>& kv,
                       int64_t n_keys, float scale, float* scores, float* out) {
#if WALSH_X86_KERNELS
  if (isa != CpuIsa::kScalar && AttendOneHeadAvx2(q, head_dim, kv, n_keys, scale, scores, out)) {
    return;
  }
#else
  (void)isa;
#endif
  AttendOneHeadInterleaved(q, head_dim, kv, n_keys, scale, scores, out);
}

template void AttendOneHeadFast<float>(CpuIsa, const float*, int64_t, const PagedKv<float>&,
                                       int64_t, float, float*, float*);
template void AttendOneHeadFast<uint16_t>(CpuIsa, const float*, int64_t, const PagedKv<uint16_t>&,
                                          int64_t, float, float*, float*);
template void AttendOneHeadInterleaved<float>(const float*, int64_t, const PagedKv<float>&, int64_t,
                                              float, float*, float*);
template void AttendOneHeadInterleaved<uint16_t>(const float*, int64_t, const PagedKv<uint16_t>&,
                                                 int64_t, float, float*, float*);
template void AttendOneHeadFast<KvQ8>(CpuIsa, const float*, int64_t, const PagedKv<KvQ8>&, int64_t,
                                      float, float*, float*);
template void AttendOneHeadFast<KvQ4>(CpuIsa, const float*, int64_t, const PagedKv<KvQ4>&, int64_t,
                                      float, float*, float*);

void DenseRowsDot8Tokens(CpuIsa isa, DenseFormat format, const void* w, const int64_t* rows,
                         int64_t n_rows, int64_t cols, const float* x, int64_t x_stride, float* y,
                         int64_t y_stride) {
#if WALSH_X86_KERNELS
  if (isa != CpuIsa::kScalar) {
    DenseRowsDot8TokensAvx2(format, w, rows, n_rows, cols, x, x_stride, y, y_stride);
    return;
  }
#endif
  for (int t = 0; t < 8; ++t)
    DenseRowsDot(format, w, rows, n_rows, cols, x + t * x_stride, y + t * y_stride);
}

void DenseRowsDot(DenseFormat format, const void* w, const int64_t* rows, int64_t n, int64_t cols,
                  const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = DenseRowDot(format, w, rows[i], cols, x);
}

}  // namespace walsh
