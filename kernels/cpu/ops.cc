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

// Rows j0 .. j0 + n - 1 of value head h (n <= kChains), each as GdnHeadRow computes it.
void GdnHeadRows(const GdnLayerParams& p, const float* u, int64_t h, float beta, float decay,
                 int64_t j0, int n, float* S, float* o) {
  const int64_t kh = p.key_head_of(h);
  const float* qq = u + kh * p.hd;
  const float* kk = u + p.key_dim() + kh * p.hd;
  const float* vv = u + 2 * p.key_dim() + h * p.hd;
  float* row[kChains];
  float pred[kChains], delta[kChains], acc[kChains];
  for (int r = 0; r < n; ++r) {
    row[r] = S + (h * p.hd + j0 + r) * p.hd;
    pred[r] = 0.0f;
    acc[r] = 0.0f;
  }
  for (int64_t i = 0; i < p.hd; ++i) {
    for (int r = 0; r < n; ++r) {
      row[r][i] *= decay;
      pred[r] += row[r][i] * kk[i];
    }
  }
  for (int r = 0; r < n; ++r) delta[r] = beta * (vv[j0 + r] - pred[r]);
  for (int64_t i = 0; i < p.hd; ++i) {
    for (int r = 0; r < n; ++r) {
      row[r][i] += delta[r] * kk[i];
      acc[r] += row[r][i] * qq[i];
    }
  }
  const float norm = RsqrtF(static_cast<float>(p.hd));
  for (int r = 0; r < n; ++r) o[j0 + r] = norm * acc[r];
}

template <typename Load>
void DenseRows(const Load& load, const int64_t* rows, int n, int64_t cols, const float* x,
               float* y) {
  float acc[kChains] = {};
  for (int64_t c = 0; c < cols; ++c) {
    for (int r = 0; r < n; ++r) acc[r] += load(rows[r] * cols + c) * x[c];
  }
  for (int r = 0; r < n; ++r) y[r] = acc[r];
}

}  // namespace

void GdnHeadStepInterleaved(const GdnLayerParams& p, const float* u, const float* z,
                            const float* alpha_raw, const float* beta_raw, int64_t h, float* S,
                            float* out) {
  float beta, decay;
  GdnHeadGates(p, alpha_raw, beta_raw, h, &beta, &decay);
  float* o = out + h * p.hd;
  for (int64_t j = 0; j < p.hd; j += kChains) {
    GdnHeadRows(p, u, h, beta, decay, j, static_cast<int>(std::min<int64_t>(kChains, p.hd - j)), S,
                o);
  }
  const float scale = RmsNormScale(o, p.hd, p.eps);
  for (int64_t j = 0; j < p.hd; ++j) o[j] = GdnGateOutput(p, o, scale, z, h, j);
}

void GdnHeadStepFast(CpuIsa isa, const GdnLayerParams& p, const float* u, const float* z,
                     const float* alpha_raw, const float* beta_raw, int64_t h, float* S,
                     float* out) {
#if WALSH_X86_KERNELS
  if (isa != CpuIsa::kScalar && GdnHeadStepAvx2(p, u, z, alpha_raw, beta_raw, h, S, out)) return;
#else
  (void)isa;
#endif
  GdnHeadStepInterleaved(p, u, z, alpha_raw, beta_raw, h, S, out);
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
      for (int r = 0; r < n; ++r) dot[r] += q[i] * KvLoad(k[r][i]);
    }
    for (int r = 0; r < n; ++r) scores[t0 + r] = dot[r] * scale;
  }
  const float sum = SoftmaxNumerators(scores, n_keys);
  for (int64_t i = 0; i < head_dim; ++i) out[i] = 0.0f;
  for (int64_t t = 0; t < n_keys; ++t) {
    const float weight = scores[t] / sum;
    const T* v = PagedRow(kv.v_base, kv, t);
    for (int64_t i = 0; i < head_dim; ++i) out[i] += weight * KvLoad(v[i]);
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
  for (int64_t i = 0; i < n; i += kChains) {
    const int m = static_cast<int>(std::min<int64_t>(kChains, n - i));
    switch (format) {
      case DenseFormat::kBf16: {
        const auto* q = static_cast<const uint16_t*>(w);
        DenseRows([q](int64_t k) { return Bf16ToFloat(q[k]); }, rows + i, m, cols, x, y + i);
        break;
      }
      case DenseFormat::kF16: {
        const auto* q = static_cast<const uint16_t*>(w);
        DenseRows([q](int64_t k) { return Fp16ToFloat(q[k]); }, rows + i, m, cols, x, y + i);
        break;
      }
      case DenseFormat::kF32: {
        const auto* q = static_cast<const float*>(w);
        DenseRows([q](int64_t k) { return q[k]; }, rows + i, m, cols, x, y + i);
        break;
      }
    }
  }
}

}  // namespace walsh
