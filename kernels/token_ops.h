// The per-token float ops of the qwen35 forward pass (docs/format.md §8), written once for the
// host and CUDA devices. Each reduction runs in one fixed order, so a token's result never
// depends on what shares its batch, which thread ran it, or which backend: the CPU backend calls
// these functions in loops, the CUDA kernels call the same functions from device threads, split
// only where the pieces are independent (rows of a head, channels, keys' scores).
#ifndef WALSH_KERNELS_TOKEN_OPS_H_
#define WALSH_KERNELS_TOKEN_OPS_H_

#include <stdint.h>

#include "kernels/float_convert.h"
#include "kernels/host_device.h"
#include "kernels/numerics.h"
#include "kernels/q8_activation.h"

namespace walsh {

// std::max's rule (the first argument unless it is less), spelled out for device code.
WALSH_HD float MaxF(float a, float b) { return a < b ? b : a; }

// ---------------------------------------------------------------------------------------------
// Norms

// The sum of squares of an RMSNorm runs in 32 lanes, so a GPU warp computes it in parallel and
// the CPU in the same order: lane l sums x[i]² for i ≡ l (mod 32) in index order, in double;
// then the lanes combine by halving, p[l] += p[l + s] for s = 16, 8, 4, 2, 1.
inline constexpr int kNormLanes = 32;

WALSH_HD double SumSquaresLane(const float* x, int64_t n, int lane) {
  double sum = 0.0;
  for (int64_t i = lane; i < n; i += kNormLanes) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

// 32 lane sums combined by halving: p[l] = p[l] + p[l + s] for s = 16, 8, 4, 2, 1.
template <typename T>
WALSH_HD T CombineLanes(T* p) {
  for (int s = kNormLanes / 2; s > 0; s /= 2) {
    for (int l = 0; l < s; ++l) p[l] = p[l] + p[l + s];
  }
  return p[0];
}

// ---------------------------------------------------------------------------------------------
// Long sums in 32 lanes (docs/format.md §8.4)
//
// Every long float sum (a dense row's dot product, a GatedDeltaNet state row's two dot
// products, the softmax denominator) runs in kSumLanes = 32 lanes: lane l takes the terms of
// index ≡ l (mod 32) in index order, starting from +0, and the lanes combine by halving
// (CombineLanes). A GPU warp runs it a lane per thread (the ...Lane functions) and combines by
// shuffles; the CPU runs the lanes side by side in vectors, chunk of 32 after chunk of 32 (the
// whole-sum functions); both give the same bits. A lane with no terms adds nothing: +0.
inline constexpr int kSumLanes = kNormLanes;

// Lane `lane` of Σ x[0..n).
WALSH_HD float SumLane(const float* x, int64_t n, int lane) {
  float sum = 0.0f;
  for (int64_t i = lane; i < n; i += kSumLanes) sum += x[i];
  return sum;
}

// Σ x[0..n) in 32 lanes.
WALSH_HD float LaneSum(const float* x, int64_t n) {
  float p[kSumLanes];
  for (int l = 0; l < kSumLanes; ++l) p[l] = 0.0f;
  for (int64_t base = 0; base < n; base += kSumLanes) {
    const int m = n - base < kSumLanes ? static_cast<int>(n - base) : kSumLanes;
    for (int l = 0; l < m; ++l) p[l] += x[base + l];
  }
  return CombineLanes(p);
}

WALSH_HD float RmsScaleFromSum(double sum_squares, int64_t n, float eps) {
  return RsqrtF(static_cast<float>(sum_squares / static_cast<double>(n)) + eps);
}

// (mean(x²) + eps)^(-1/2).
WALSH_HD float RmsNormScale(const float* x, int64_t n, float eps) {
  double p[kNormLanes];
  for (int l = 0; l < kNormLanes; ++l) p[l] = SumSquaresLane(x, n, l);
  return RmsScaleFromSum(CombineLanes(p), n, eps);
}

// out = x · RmsNormScale(x) ⊙ w. `out` may alias `x`.
WALSH_HD void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  const float scale = RmsNormScale(x, n, eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
}

// x / max(‖x‖₂, eps), in place.
WALSH_HD void L2NormInPlace(float* x, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / MaxF(sqrtf(static_cast<float>(sum)), eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

// ---------------------------------------------------------------------------------------------
// Rotary embedding

// NEOX-style rotation of the first n_rot dims of one head by pos · inv_freq[i] for the pair
// (x[i], x[i + n_rot/2]); inv_freq[i] = base^(-2i / n_rot), computed once on the host.
WALSH_HD void RopeNeoxInPlace(float* head, int64_t n_rot, int64_t pos, const double* inv_freq) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    double sin_t, cos_t;
    SinCos(static_cast<double>(pos) * inv_freq[i], &sin_t, &cos_t);
    const float c = static_cast<float>(cos_t);
    const float s = static_cast<float>(sin_t);
    const float x0 = head[i], x1 = head[i + half];
    head[i] = x0 * c - x1 * s;
    head[i + half] = x0 * s + x1 * c;
  }
}

// The same rotation with a position per pair (M-RoPE, docs/vision.md §4): pair i rotates by
// pos[stream_of_pair[i]] · inv_freq[i], the streams being t, h, w and a fourth (0 for every input
// walsh takes). With every stream at one position it is RopeNeoxInPlace bit for bit.
WALSH_HD void RopeStreamsInPlace(float* head, int64_t n_rot, const int32_t* pos,
                                 const uint8_t* stream_of_pair, const double* inv_freq) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    double sin_t, cos_t;
    SinCos(static_cast<double>(pos[stream_of_pair[i]]) * inv_freq[i], &sin_t, &cos_t);
    const float c = static_cast<float>(cos_t);
    const float s = static_cast<float>(sin_t);
    const float x0 = head[i], x1 = head[i + half];
    head[i] = x0 * c - x1 * s;
    head[i + half] = x0 * s + x1 * c;
  }
}

// ---------------------------------------------------------------------------------------------
// Activation quantization (Q8_0 numerics, kernels/q8_activation.h)

// One 128-value block: per 32 values, d = max|x| / 127 rounded to fp16 and q = round(x / d)
// with the unrounded d, as llama.cpp's quantize_row_q8_0. Each 16-element group's scale and
// −Σq go to its lane (Q8GroupLane).
WALSH_HD void QuantizeBlockQ8(const float* x, Q8Layout layout, Q8Block128* out) {
  int8_t q[128];
  for (int s = 0; s < 4; ++s) {
    float amax = 0.0f;
    for (int j = 0; j < kQ8SubBlock; ++j) amax = MaxF(amax, fabsf(x[s * 32 + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float d16 = Fp16ToFloat(FloatToFp16(d));
    for (int h = 0; h < 2; ++h) {
      const int g = 2 * s + h;
      int32_t sum = 0;
      for (int j = 16 * g; j < 16 * g + 16; ++j) {
        // A value past int's range (NaN, or ±inf when 1/d overflows) gives -127: what x86's
        // conversion (INT_MIN, then clamped) and the SIMD paths give, here in defined C++.
        const float r = roundf(x[j] * id);
        int v = r >= -2147483648.0f && r < 2147483648.0f ? static_cast<int>(r) : -127;
        v = v < -127 ? -127 : (v > 127 ? 127 : v);
        q[j] = static_cast<int8_t>(v);
        sum += v;
      }
      out->d[Q8GroupLane(layout, g)] = d16;
      out->minus_sum[Q8GroupLane(layout, g)] = -sum;
    }
  }
  for (int i = 0; i < 128; ++i) out->qs[i] = q[Q8ElementAt(layout, i)];
}

// ---------------------------------------------------------------------------------------------
// Small dense projections (the unfolded ssm_alpha / ssm_beta)

enum class DenseFormat : uint8_t { kF32, kF16, kBf16 };

// A dense row's elements as floats, by format.
struct F32Elems {
  const float* p;
  WALSH_HD float operator[](int64_t i) const { return p[i]; }
};
struct Fp16Elems {
  const uint16_t* p;
  WALSH_HD float operator[](int64_t i) const { return Fp16ToFloat(p[i]); }
};
struct Bf16Elems {
  const uint16_t* p;
  WALSH_HD float operator[](int64_t i) const { return Bf16ToFloat(p[i]); }
};

// Lane `lane` of Σ_c w[c] · x[c].
template <typename Elems>
WALSH_HD float DotLane(const Elems& w, const float* x, int64_t n, int lane) {
  float sum = 0.0f;
  for (int64_t c = lane; c < n; c += kSumLanes) sum += w[c] * x[c];
  return sum;
}

// Σ_c w[c] · x[c] in 32 lanes.
template <typename Elems>
WALSH_HD float LaneDot(const Elems& w, const float* x, int64_t n) {
  float p[kSumLanes];
  for (int l = 0; l < kSumLanes; ++l) p[l] = 0.0f;
  for (int64_t base = 0; base < n; base += kSumLanes) {
    const int m = n - base < kSumLanes ? static_cast<int>(n - base) : kSumLanes;
    for (int l = 0; l < m; ++l) p[l] += w[base + l] * x[base + l];
  }
  return CombineLanes(p);
}

// Σ_c W[r][c] · x[c], in 32 lanes.
WALSH_HD float DenseRowDot(DenseFormat format, const void* w, int64_t r, int64_t cols,
                           const float* x) {
  switch (format) {
    case DenseFormat::kBf16:
      return LaneDot(Bf16Elems{static_cast<const uint16_t*>(w) + r * cols}, x, cols);
    case DenseFormat::kF16:
      return LaneDot(Fp16Elems{static_cast<const uint16_t*>(w) + r * cols}, x, cols);
    case DenseFormat::kF32:
      break;
  }
  return LaneDot(F32Elems{static_cast<const float*>(w) + r * cols}, x, cols);
}

// Lane `lane` of DenseRowDot.
WALSH_HD float DenseRowDotLane(DenseFormat format, const void* w, int64_t r, int64_t cols,
                               const float* x, int lane) {
  switch (format) {
    case DenseFormat::kBf16:
      return DotLane(Bf16Elems{static_cast<const uint16_t*>(w) + r * cols}, x, cols, lane);
    case DenseFormat::kF16:
      return DotLane(Fp16Elems{static_cast<const uint16_t*>(w) + r * cols}, x, cols, lane);
    case DenseFormat::kF32:
      break;
  }
  return DotLane(F32Elems{static_cast<const float*>(w) + r * cols}, x, cols, lane);
}

// ---------------------------------------------------------------------------------------------
// Paged causal attention of one query head

// KV cache rows: fp16 (the default: half the memory, as vLLM keeps the model's 16-bit dtype),
// fp32 (the fp32-activation debug mode), or quantized per 32 values of one position (KvQ8,
// KvQ4: a scale and the values' codes), so writing a position never touches another's bytes or
// scales. Stored once, read back the same way by every step, so a token's keys never depend on
// how its sequence was fed. A row is an array of units T: one value each for fp32 and fp16, 32
// for the quantized ones (KvValuesPerUnit).
inline constexpr int kKvGroup = 32;

// d = max|x| / 127 rounded to fp16; x ≈ d · q, q in [-127, 127].
struct KvQ8 {
  uint16_t d;
  int8_t q[kKvGroup];
};
// d = max|x| / 7 rounded to fp16; x ≈ d · (n - 8) for the nibble n, value 2m in the low nibble
// of byte m, value 2m + 1 in the high one.
struct KvQ4 {
  uint16_t d;
  uint8_t q[kKvGroup / 2];
};

template <typename T>
inline constexpr int64_t KvValuesPerUnit = 1;
template <>
inline constexpr int64_t KvValuesPerUnit<KvQ8> = kKvGroup;
template <>
inline constexpr int64_t KvValuesPerUnit<KvQ4> = kKvGroup;

WALSH_HD float KvLoadAt(const float* row, int64_t i) { return row[i]; }
WALSH_HD float KvLoadAt(const uint16_t* row, int64_t i) { return Fp16ToFloat(row[i]); }
WALSH_HD float KvLoadAt(const KvQ8* row, int64_t i) {
  const KvQ8& g = row[i / kKvGroup];
  return Fp16ToFloat(g.d) * static_cast<float>(g.q[i % kKvGroup]);
}
WALSH_HD float KvLoadAt(const KvQ4* row, int64_t i) {
  const KvQ4& g = row[i / kKvGroup];
  const int j = static_cast<int>(i % kKvGroup);
  const int n = (g.q[j / 2] >> (4 * (j % 2))) & 0xf;
  return Fp16ToFloat(g.d) * static_cast<float>(n - 8);
}

// Values x[0..n) into a row (n a multiple of the unit's values).
WALSH_HD void KvStoreRow(const float* x, int64_t n, float* row) {
  for (int64_t i = 0; i < n; ++i) row[i] = x[i];
}
WALSH_HD void KvStoreRow(const float* x, int64_t n, uint16_t* row) {
  for (int64_t i = 0; i < n; ++i) row[i] = FloatToFp16(x[i]);
}
// One group's scale from its largest magnitude over `levels` (127 or 7), saturated at fp16's
// largest finite value, and 1 / that scale rounded to fp16 and back, so that codes are chosen
// against the scale a reader will use.
WALSH_HD float KvGroupScale(const float* x, float levels, uint16_t* d16) {
  float amax = 0.0f;
  for (int j = 0; j < kKvGroup; ++j) amax = MaxF(amax, fabsf(x[j]));
  const float d_wanted = amax / levels;
  *d16 = FloatToFp16(d_wanted < 65504.0f ? d_wanted : 65504.0f);
  const float d = Fp16ToFloat(*d16);
  return d != 0.0f ? 1.0f / d : 0.0f;
}

// round(x · id) clamped to [lo, hi] before it becomes an integer, NaN to 0: the same code on
// every device (a float-to-int conversion of NaN or of an out-of-range value is undefined).
WALSH_HD int KvCode(float x, float id, float lo, float hi) {
  float r = roundf(x * id);
  r = r < lo ? lo : (r > hi ? hi : r);
  return r == r ? static_cast<int>(r) : 0;
}
WALSH_HD void KvStoreRow(const float* x, int64_t n, KvQ8* row) {
  for (int64_t b = 0; b < n / kKvGroup; ++b) {
    const float* xb = x + b * kKvGroup;
    const float id = KvGroupScale(xb, 127.0f, &row[b].d);
    for (int j = 0; j < kKvGroup; ++j) {
      row[b].q[j] = static_cast<int8_t>(KvCode(xb[j], id, -127.0f, 127.0f));
    }
  }
}
WALSH_HD void KvStoreRow(const float* x, int64_t n, KvQ4* row) {
  for (int64_t b = 0; b < n / kKvGroup; ++b) {
    const float* xb = x + b * kKvGroup;
    const float id = KvGroupScale(xb, 7.0f, &row[b].d);
    for (int j = 0; j < kKvGroup; j += 2) {
      const int lo = KvCode(xb[j], id, -8.0f, 7.0f), hi = KvCode(xb[j + 1], id, -8.0f, 7.0f);
      row[b].q[j / 2] = static_cast<uint8_t>((lo + 8) | (hi + 8) << 4);
    }
  }
}

// Position τ's K row is k_base + pages[τ / page_size] · page_stride + (τ % page_size) ·
// row_stride + offset (V likewise from v_base), all counted in units T.
template <typename T>
struct PagedKv {
  const T* k_base;
  const T* v_base;
  const int32_t* pages;
  int64_t page_stride;  // units from one page to the next
  int64_t page_size;    // positions per page
  int64_t row_stride;   // units per position in a page
  int64_t offset;       // the head's first unit in a position's row
};

template <typename T>
WALSH_HD const T* PagedRow(const T* base, const PagedKv<T>& kv, int64_t t) {
  return base + kv.pages[t / kv.page_size] * kv.page_stride + (t % kv.page_size) * kv.row_stride +
         kv.offset;
}

// q · k_τ (in index order) times scale.
template <typename T>
WALSH_HD float AttentionScore(const float* q, int64_t head_dim, const PagedKv<T>& kv, int64_t t,
                              float scale) {
  const T* k = PagedRow(kv.k_base, kv, t);
  float dot = 0.0f;
  for (int64_t i = 0; i < head_dim; ++i) dot += q[i] * KvLoadAt(k, i);
  return dot * scale;
}

WALSH_HD float MaxScore(const float* scores, int64_t n) {
  float max_score = BitsFloat(0xff800000u);
  for (int64_t t = 0; t < n; ++t) max_score = MaxF(max_score, scores[t]);
  return max_score;
}

// Softmax over scores[0..n) in place: leaves e^(s_τ - max) in scores (each independent of the
// others) and returns their sum in 32 lanes.
WALSH_HD float SoftmaxNumerators(float* scores, int64_t n) {
  const float max_score = MaxScore(scores, n);
  for (int64_t t = 0; t < n; ++t) scores[t] = ExpF(scores[t] - max_score);
  return LaneSum(scores, n);
}

// out[i] = Σ_τ (e_τ / sum) · v_τ[i], over τ in position order.
template <typename T>
WALSH_HD float AttentionOutput(const float* numerators, float sum, const PagedKv<T>& kv,
                               int64_t n_keys, int64_t i) {
  float acc = 0.0f;
  for (int64_t t = 0; t < n_keys; ++t) {
    acc += (numerators[t] / sum) * KvLoadAt(PagedRow(kv.v_base, kv, t), i);
  }
  return acc;
}

// The whole head: scores (n_keys floats of scratch) → softmax → weighted values.
template <typename T>
WALSH_HD void AttendOneHead(const float* q, int64_t head_dim, const PagedKv<T>& kv, int64_t n_keys,
                            float scale, float* scores, float* out) {
  for (int64_t t = 0; t < n_keys; ++t) scores[t] = AttentionScore(q, head_dim, kv, t, scale);
  const float sum = SoftmaxNumerators(scores, n_keys);
  for (int64_t i = 0; i < head_dim; ++i) out[i] = AttentionOutput(scores, sum, kv, n_keys, i);
}

// ---------------------------------------------------------------------------------------------
// Gated DeltaNet (docs/format.md §8.3)

// One GatedDeltaNet layer as one rank computes it: n_k key heads and n_v value heads, the value
// heads in grouped order (the value heads of a key head side by side), so that local value head
// h reads local key head (value_head_base + h) / rep - value_head_base / rep. The conv input
// and state hold the rank's channels: q of its key heads, k of its key heads, v of its value
// heads; conv_w, ssm_a and dt_bias are gathered to match.
struct GdnLayerParams {
  int64_t n_k, n_v, hd, conv_kernel;  // key heads, value heads, head width, conv taps
  const float* conv_w;                // [conv_dim][conv_kernel]
  const float* ssm_a;                 // [n_v], -exp(A_log)
  const float* dt_bias;               // [n_v]
  const float* norm_w;                // [hd]
  float eps;
  int64_t rep = 1;              // value heads per key head in the model
  int64_t value_head_base = 0;  // the model's grouped index of local value head 0

  WALSH_HD int64_t key_head_of(int64_t h) const {
    return (value_head_base + h) / rep - value_head_base / rep;
  }

  WALSH_HD int64_t key_dim() const { return n_k * hd; }
  WALSH_HD int64_t conv_dim() const { return 2 * n_k * hd + n_v * hd; }
};

// Channel ch of the causal depthwise conv (tap conv_kernel-1 multiplies the current input),
// then SiLU; shifts the channel's window (conv_state: [conv_kernel-1][conv_dim], oldest first).
WALSH_HD float GdnConvChannel(const GdnLayerParams& p, const float* conv_in, float* conv_state,
                              int64_t ch) {
  const int64_t conv_dim = p.conv_dim(), taps = p.conv_kernel;
  const float* w = p.conv_w + ch * taps;
  float acc = 0.0f;
  for (int64_t k = 0; k < taps - 1; ++k) acc += w[k] * conv_state[k * conv_dim + ch];
  acc += w[taps - 1] * conv_in[ch];
  for (int64_t k = 0; k + 2 < taps; ++k) {
    conv_state[k * conv_dim + ch] = conv_state[(k + 1) * conv_dim + ch];
  }
  if (taps > 1) conv_state[(taps - 2) * conv_dim + ch] = conv_in[ch];
  return Silu(acc);
}

// The conv over every channel into u (conv_dim floats), then the q and k heads L2-normed.
WALSH_HD void GdnConvStep(const GdnLayerParams& p, const float* conv_in, float* conv_state,
                          float* u) {
  for (int64_t ch = 0; ch < p.conv_dim(); ++ch) u[ch] = GdnConvChannel(p, conv_in, conv_state, ch);
  for (int64_t h = 0; h < 2 * p.n_k; ++h) L2NormInPlace(u + h * p.hd, p.hd, p.eps);
}

// β = σ(β_raw[h]) and the decay e^(softplus(α_raw[h] + dt_bias[h]) · a[h]) of value head h.
WALSH_HD void GdnHeadGates(const GdnLayerParams& p, const float* alpha_raw, const float* beta_raw,
                           int64_t h, float* beta, float* decay) {
  *beta = Sigmoid(beta_raw[h]);
  *decay = ExpF(Softplus(alpha_raw[h] + p.dt_bias[h]) * p.ssm_a[h]);
}

// Row j of value head h's delta rule, in two sums: the prediction S_j · k after the decay, then
// the output S_j · q after the update S_j += δ k, δ = β (v_j - prediction). Each runs in 32
// lanes; the lane functions touch only their lane's elements of S_j.
WALSH_HD float GdnDecayPredictLane(float* Sj, const float* kk, float decay, int64_t hd, int lane) {
  float sum = 0.0f;
  for (int64_t i = lane; i < hd; i += kSumLanes) {
    Sj[i] *= decay;
    sum += Sj[i] * kk[i];
  }
  return sum;
}

WALSH_HD float GdnUpdateOutputLane(float* Sj, const float* kk, const float* qq, float delta,
                                   int64_t hd, int lane) {
  float sum = 0.0f;
  for (int64_t i = lane; i < hd; i += kSumLanes) {
    Sj[i] += delta * kk[i];
    sum += Sj[i] * qq[i];
  }
  return sum;
}

// Row j of value head h's delta rule: decays and updates S[h][j][·] and returns the head's
// output o[j] before its norm. Rows are independent of each other.
WALSH_HD float GdnHeadRow(const GdnLayerParams& p, const float* u, int64_t h, float beta,
                          float decay, int64_t j, float* S) {
  const int64_t kh = p.key_head_of(h), hd = p.hd;
  const float* qq = u + kh * hd;
  const float* kk = u + p.key_dim() + kh * hd;
  const float* vv = u + 2 * p.key_dim() + h * hd;
  float* Sj = S + (h * hd + j) * hd;
  float lanes[kSumLanes];
  for (int l = 0; l < kSumLanes; ++l) lanes[l] = 0.0f;
  for (int64_t base = 0; base < hd; base += kSumLanes) {
    const int m = hd - base < kSumLanes ? static_cast<int>(hd - base) : kSumLanes;
    for (int l = 0; l < m; ++l) {
      Sj[base + l] *= decay;
      lanes[l] += Sj[base + l] * kk[base + l];
    }
  }
  const float delta = beta * (vv[j] - CombineLanes(lanes));
  for (int l = 0; l < kSumLanes; ++l) lanes[l] = 0.0f;
  for (int64_t base = 0; base < hd; base += kSumLanes) {
    const int m = hd - base < kSumLanes ? static_cast<int>(hd - base) : kSumLanes;
    for (int l = 0; l < m; ++l) {
      Sj[base + l] += delta * kk[base + l];
      lanes[l] += Sj[base + l] * qq[base + l];
    }
  }
  return RsqrtF(static_cast<float>(hd)) * CombineLanes(lanes);
}

// Gated RMSNorm of head h's output with the shared head-width weight, element j.
WALSH_HD float GdnGateOutput(const GdnLayerParams& p, const float* o_head, float norm_scale,
                             const float* z, int64_t h, int64_t j) {
  return ((o_head[j] * norm_scale) * p.norm_w[j]) * Silu(z[h * p.hd + j]);
}

// One token's delta rule for value head h: S [n_v][hd][hd] (value, key), out [n_v·hd].
WALSH_HD void GdnHeadStep(const GdnLayerParams& p, const float* u, const float* z,
                          const float* alpha_raw, const float* beta_raw, int64_t h, float* S,
                          float* out) {
  float beta, decay;
  GdnHeadGates(p, alpha_raw, beta_raw, h, &beta, &decay);
  float* o = out + h * p.hd;
  for (int64_t j = 0; j < p.hd; ++j) o[j] = GdnHeadRow(p, u, h, beta, decay, j, S);
  const float scale = RmsNormScale(o, p.hd, p.eps);
  for (int64_t j = 0; j < p.hd; ++j) o[j] = GdnGateOutput(p, o, scale, z, h, j);
}

}  // namespace walsh

#endif  // WALSH_KERNELS_TOKEN_OPS_H_
