#include "kernels/cpu/query_block_attention.h"

#include <algorithm>

#include "kernels/token_ops.h"

namespace walsh {

void PackKeyPanels(const float* keys, int64_t key_stride, int64_t n_keys, int64_t head_dim,
                   float* panels) {
  std::fill_n(panels, KeyPanelFloats(n_keys, head_dim), 0.0f);
  for (int64_t t = 0; t < n_keys; ++t) {
    float* panel = panels + t / kKeyPanel * kKeyPanel * head_dim + t % kKeyPanel;
    for (int64_t i = 0; i < head_dim; ++i) panel[i * kKeyPanel] = keys[t * key_stride + i];
  }
}

void AttendQueryBlockScalar(const QueryBlockHead& head, const float* q, int64_t q_stride,
                            int64_t n_queries, float scale, float* scores, float* out,
                            int64_t out_stride) {
  const int64_t n = head.n_keys, hd = head.head_dim;
  for (int64_t j = 0; j < n_queries; ++j) {
    const float* qj = q + j * q_stride;
    float* s = scores + j * KeyPanelCount(n) * kKeyPanel;
    for (int64_t t = 0; t < n; ++t) {
      const float* k = head.key_panels + t / kKeyPanel * kKeyPanel * hd + t % kKeyPanel;
      float dot = 0.0f;
      for (int64_t i = 0; i < hd; ++i) dot += qj[i] * k[i * kKeyPanel];
      s[t] = dot * scale;
    }
    const float sum = SoftmaxNumerators(s, n);
    float* o = out + j * out_stride;
    std::fill_n(o, hd, 0.0f);
    for (int64_t t = 0; t < n; ++t) {
      const float weight = s[t] / sum;
      const float* v = head.values + t * head.value_stride;
      for (int64_t i = 0; i < hd; ++i) o[i] += weight * v[i];
    }
  }
}

void AttendQueryBlock(CpuIsa isa, const QueryBlockHead& head, const float* q, int64_t q_stride,
                      int64_t n_queries, float scale, float* scores, float* out,
                      int64_t out_stride) {
#if WALSH_X86_KERNELS
  if (isa != CpuIsa::kScalar &&
      AttendQueryBlockAvx2(head, q, q_stride, n_queries, scale, scores, out, out_stride)) {
    return;
  }
#else
  (void)isa;
#endif
  AttendQueryBlockScalar(head, q, q_stride, n_queries, scale, scores, out, out_stride);
}

}  // namespace walsh
