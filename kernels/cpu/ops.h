// Per-token float ops of the qwen35 forward pass (FORMAT.md §8), scalar and in one fixed
// order each: a token's result never depends on what else shares its batch.
#ifndef WALSH_KERNELS_CPU_OPS_H_
#define WALSH_KERNELS_CPU_OPS_H_

#include <cstdint>

namespace walsh {

float Sigmoid(float x);
float Silu(float x);
float Softplus(float x);  // log(1 + e^x), and x itself above 20 (as ggml)

// out = x · (mean(x²) + eps)^(-1/2) ⊙ w. `out` may alias `x`.
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out);

// out = x / max(‖x‖₂, eps), in place.
void L2NormInPlace(float* x, int64_t n, float eps);

// NEOX-style rotary embedding on the first n_rot dims of one head, in place:
// (x[i], x[i + n_rot/2]) rotated by pos · base^(-2i / n_rot).
void RopeNeoxInPlace(float* head, int64_t n_rot, int64_t pos, float base);

// out[i] = silu(gate[i]) * up[i].
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// y[r] = Σ_c W[r][c] · x[c] for a row-major dense matrix stored as BF16, F16 or F32
// (ggml type id 30, 1 or 0), sequential over c.
void DenseMatVec(uint32_t ggml_type, const void* w, int64_t rows, int64_t cols, const float* x,
                 float* y);

// Causal attention of one query head over `n_keys` cached positions. Keys and values live in
// pages of `page_size` positions; position τ is at pages[τ / page_size] + (τ % page_size) *
// row_stride + offset. Reduces over τ = 0, 1, ... in that order.
struct PagedKv {
  const float* const* k_pages;
  const float* const* v_pages;
  int64_t page_size;
  int64_t row_stride;  // floats per position in a page
  int64_t offset;      // the head's first float in a position's row
};
void AttendOneHead(const float* q, int64_t head_dim, const PagedKv& kv, int64_t n_keys, float scale,
                   float* scores_scratch, float* out);

// One Gated DeltaNet step (FORMAT.md §8.3, steps 2-7) for one token of one sequence.
struct GdnLayerParams {
  int64_t n_k, n_v, hd, conv_kernel;  // key heads, value heads, head width, conv taps
  const float* conv_w;                // [conv_dim][conv_kernel]
  const float* ssm_a;                 // [n_v], -exp(A_log)
  const float* dt_bias;               // [n_v]
  const float* norm_w;                // [hd]
  float eps;
};
// conv_in: [conv_dim] (W_qkv x̂); z: [n_v·hd]; alpha_raw, beta_raw: [n_v];
// conv_state: [(conv_kernel-1)][conv_dim], oldest first; S: [n_v][hd][hd] (value, key);
// scratch: conv_dim floats. out: [n_v·hd] in tiled head order.
void GdnStep(const GdnLayerParams& p, const float* conv_in, const float* z, const float* alpha_raw,
             const float* beta_raw, float* conv_state, float* S, float* scratch, float* out);

// GdnStep in two parts, so the value heads can run in parallel: the conv window, SiLU and the
// q/k L2 norms into `u` (conv_dim floats), then each head's delta rule and gated norm.
void GdnConvStep(const GdnLayerParams& p, const float* conv_in, float* conv_state, float* u);
void GdnHeadStep(const GdnLayerParams& p, const float* u, const float* z, const float* alpha_raw,
                 const float* beta_raw, int64_t head, float* S, float* out);

int64_t Argmax(const float* x, int64_t n);  // lowest index on ties

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_OPS_H_
