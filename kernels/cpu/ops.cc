#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/float_convert.h"

namespace walsh {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float Silu(float x) { return x / (1.0f + std::exp(-x)); }
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
}

void L2NormInPlace(float* x, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::max(std::sqrt(static_cast<float>(sum)), eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

void RopeNeoxInPlace(float* head, int64_t n_rot, int64_t pos, float base) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double theta = static_cast<double>(pos) *
                         std::pow(static_cast<double>(base),
                                  -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    const float c = static_cast<float>(std::cos(theta));
    const float s = static_cast<float>(std::sin(theta));
    const float x0 = head[i], x1 = head[i + half];
    head[i] = x0 * c - x1 * s;
    head[i + half] = x0 * s + x1 * c;
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

void DenseMatVec(uint32_t ggml_type, const void* w, int64_t rows, int64_t cols, const float* x,
                 float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0.0f;
    if (ggml_type == 30) {
      const uint16_t* row = static_cast<const uint16_t*>(w) + r * cols;
      for (int64_t c = 0; c < cols; ++c) acc += Bf16ToFloat(row[c]) * x[c];
    } else if (ggml_type == 1) {
      const uint16_t* row = static_cast<const uint16_t*>(w) + r * cols;
      for (int64_t c = 0; c < cols; ++c) acc += Fp16ToFloat(row[c]) * x[c];
    } else {
      const float* row = static_cast<const float*>(w) + r * cols;
      for (int64_t c = 0; c < cols; ++c) acc += row[c] * x[c];
    }
    y[r] = acc;
  }
}

void AttendOneHead(const float* q, int64_t head_dim, const PagedKv& kv, int64_t n_keys, float scale,
                   float* scores, float* out) {
  auto row = [&](const float* const* pages, int64_t t) {
    return pages[t / kv.page_size] + (t % kv.page_size) * kv.row_stride + kv.offset;
  };
  float max_score = -INFINITY;
  for (int64_t t = 0; t < n_keys; ++t) {
    const float* k = row(kv.k_pages, t);
    float dot = 0.0f;
    for (int64_t i = 0; i < head_dim; ++i) dot += q[i] * k[i];
    scores[t] = dot * scale;
    max_score = std::max(max_score, scores[t]);
  }
  float sum = 0.0f;
  for (int64_t t = 0; t < n_keys; ++t) {
    scores[t] = std::exp(scores[t] - max_score);
    sum += scores[t];
  }
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t t = 0; t < n_keys; ++t) {
    const float* v = row(kv.v_pages, t);
    const float p = scores[t] / sum;
    for (int64_t i = 0; i < head_dim; ++i) out[i] += p * v[i];
  }
}

void GdnConvStep(const GdnLayerParams& p, const float* conv_in, float* conv_state, float* u) {
  const int64_t key_dim = p.n_k * p.hd, value_dim = p.n_v * p.hd;
  const int64_t conv_dim = 2 * key_dim + value_dim, taps = p.conv_kernel;
  // Causal depthwise conv; tap taps-1 multiplies the current input.
  for (int64_t ch = 0; ch < conv_dim; ++ch) {
    const float* w = p.conv_w + ch * taps;
    float acc = 0.0f;
    for (int64_t k = 0; k < taps - 1; ++k) acc += w[k] * conv_state[k * conv_dim + ch];
    acc += w[taps - 1] * conv_in[ch];
    u[ch] = Silu(acc);
  }
  if (taps > 1) {
    std::memmove(conv_state, conv_state + conv_dim, (taps - 2) * conv_dim * sizeof(float));
    std::memcpy(conv_state + (taps - 2) * conv_dim, conv_in, conv_dim * sizeof(float));
  }
  for (int64_t h = 0; h < p.n_k; ++h) {
    L2NormInPlace(u + h * p.hd, p.hd, p.eps);
    L2NormInPlace(u + key_dim + h * p.hd, p.hd, p.eps);
  }
}

void GdnHeadStep(const GdnLayerParams& p, const float* u, const float* z, const float* alpha_raw,
                 const float* beta_raw, int64_t h, float* S, float* out) {
  const int64_t key_dim = p.n_k * p.hd;
  const int64_t kh = h % p.n_k;  // tiled value-head order
  const float* qq = u + kh * p.hd;
  const float* kk = u + key_dim + kh * p.hd;
  const float* vv = u + 2 * key_dim + h * p.hd;
  const float out_scale = 1.0f / std::sqrt(static_cast<float>(p.hd));
  const float beta = Sigmoid(beta_raw[h]);
  const float decay = std::exp(Softplus(alpha_raw[h] + p.dt_bias[h]) * p.ssm_a[h]);
  float* Sh = S + h * p.hd * p.hd;
  float* o = out + h * p.hd;
  for (int64_t j = 0; j < p.hd; ++j) {
    float* Sj = Sh + j * p.hd;
    float pred = 0.0f;
    for (int64_t i = 0; i < p.hd; ++i) {
      Sj[i] *= decay;
      pred += Sj[i] * kk[i];
    }
    const float delta = beta * (vv[j] - pred);
    float acc = 0.0f;
    for (int64_t i = 0; i < p.hd; ++i) {
      Sj[i] += delta * kk[i];
      acc += Sj[i] * qq[i];
    }
    o[j] = out_scale * acc;
  }
  // Gated RMSNorm with the shared head-width weight.
  RmsNorm(o, p.norm_w, p.hd, p.eps, o);
  const float* zh = z + h * p.hd;
  for (int64_t j = 0; j < p.hd; ++j) o[j] *= Silu(zh[j]);
}

void GdnStep(const GdnLayerParams& p, const float* conv_in, const float* z, const float* alpha_raw,
             const float* beta_raw, float* conv_state, float* S, float* u, float* out) {
  GdnConvStep(p, conv_in, conv_state, u);
  for (int64_t h = 0; h < p.n_v; ++h) GdnHeadStep(p, u, z, alpha_raw, beta_raw, h, S, out);
}

int64_t Argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace walsh
