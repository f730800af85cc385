// The CUDA kernels of the qwen35 forward pass (sm_90), as host launchers: raw device pointers,
// sizes and a stream in, a CUDA error code out (0 = success). Callers (worker/engine/
// cuda_backend.cc) check shapes first; the kernels assume valid inputs.
//
// Numerics: every kernel computes with the host-and-device functions of kernels/token_ops.h,
// kernels/numerics.h and the ternary block decode and combine, split across threads only where
// the pieces are independent, so each result is bit-identical to the CPU backend's
// (tests/unit/kernels/numerics_test.cc checks the decompositions on the CPU). Built with
// --fmad=false.
#ifndef WALSH_KERNELS_CUDA_OPS_H_
#define WALSH_KERNELS_CUDA_OPS_H_

#include <stdint.h>

#include "kernels/q8_activation.h"
#include "kernels/ternary_product.h"
#include "kernels/token_ops.h"
#include "kernels/weight_format.h"

typedef struct CUstream_st* cudaStream_t;

namespace walsh::cuda {

// ---------------------------------------------------------------------------------------------
// Rotation and quantization

// The GDN value-head permutation P (tiled to grouped order), or n_k = 0 for none.
struct Permutation {
  int64_t n_k = 0, rep = 0, hd = 0;
};

// out[r] = s_after ⊙ T(s_before ⊙ P(x[r])) with T the normalized WHT of every `block` values
// (a power of two up to 1024); either sign vector may be null. `out` must not alias `x`.
int SignedFwht(const float* x, int64_t rows, int64_t width, int64_t block,
               const int8_t* signs_before, const int8_t* signs_after, Permutation permute,
               float* out, cudaStream_t stream);
// rows × width values (width a multiple of 128) into Q8 blocks in `layout`.
int QuantizeRowsQ8(const float* x, int64_t rows, int64_t width, Q8Layout layout, Q8Block128* out,
                   cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Products

// The product p (kernels/ternary_product.h) for local rows [0, rows): device pointers in p. Rows
// in the lanes layout (p.w.layout) run the lanes mat-vec (default variant) up to 4 tokens and
// the tensor-core product from kMmaMinTokens on; rows as in the file, the file-layout kernel.
int TernaryMatMulQ8(const TernaryProduct& p, int64_t rows, cudaStream_t stream);
inline constexpr int64_t kMmaMinTokens = 5;
// The product p on lanes-layout rows on the tensor cores (ternary_mma.cu), any token count.
int TernaryMatMulQ8Mma(const TernaryProduct& p, int64_t rows, cudaStream_t stream);
// How the lanes mat-vec (ternary_matvec.cu) runs: quads of 4 blocks each lane has in flight
// (1, 2 or 4), warps per CTA (at most 8), and PTQ1_0's decode (digit planes, or a byte → trit
// table in shared memory). tests/gpu/gpu_check.cu sweeps them.
struct MatVecVariant {
  int quads_in_flight = 2;
  int warps_per_cta = 8;
  bool ptq1_table = false;
};
// The product p on lanes-layout rows (p.w.layout == kLanes, LanesLayoutFits(p.w.cols)).
int TernaryMatMulQ8Lanes(const TernaryProduct& p, int64_t rows, MatVecVariant v,
                         cudaStream_t stream);
// A kernel's registers, local-memory bytes per thread (spills), CTAs resident per SM, threads.
struct KernelFootprint {
  int registers = 0, local_bytes = 0, ctas_per_sm = 0, threads = 0;
};
// The footprint of the lanes mat-vec that TernaryMatMulQ8Lanes runs for `tokens` tokens.
int LanesKernelFootprint(TernaryFormat format, int64_t tokens, MatVecVariant v,
                         KernelFootprint* out);
// The footprint of the tensor-core product's kernel.
int MmaKernelFootprint(TernaryFormat format, KernelFootprint* out);
// y[t · y_stride + col_offset + i] = DenseRowDot(w, row i, x[t]) for local rows i < rows, row
// i being row_index[i] or row_first + i.
int DenseProject(DenseFormat format, const void* w, int64_t cols, const int32_t* row_index,
                 int64_t row_first, int64_t rows, const float* x, int64_t n_tokens, float* y,
                 int64_t y_stride, int64_t col_offset, cudaStream_t stream);
// out[i] = the pairwise tree over leaves[0..n_leaves) at i (n_leaves a power of two up to 8).
struct Leaves {
  const float* leaf[8];
};
int TreeSum(Leaves leaves, int n_leaves, int64_t count, float* out, cudaStream_t stream);
// GatedDeltaNet outputs from grouped to tiled value-head order, per token (rows of
// n_k · rep · hd values).
int Ungroup(const float* x, int64_t rows, int64_t n_k, int64_t rep, int64_t hd, float* out,
            cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Elementwise and per-row

// out[t] = the dequantized embedding row tokens[t] of `table` (device data, either layout).
int EmbedRows(const TernaryWeights& table, const int32_t* tokens, int64_t n_tokens, float* out,
              cudaStream_t stream);
int RmsNormRows(const float* x, int64_t rows, int64_t cols, const float* weight, float eps,
                float* out, cudaStream_t stream);
int AddInPlace(float* acc, const float* x, int64_t n, cudaStream_t stream);
int SwiGlu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);
// out[t] = rows[row_of_token[t]] (cols values) for each token t whose entry is not negative:
// an image's rows in place of its placeholder tokens' embeddings.
int ReplaceRows(float* out, int64_t cols, const int32_t* row_of_token, int64_t n_tokens,
                const float* rows, cudaStream_t stream);
// out[i] = x[rows[i]] for n rows of cols values.
int GatherRows(const float* x, int64_t cols, const int32_t* rows, int64_t n, float* out,
               cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Attention over paged KV

// One step's tokens as the attention and GDN kernels see them (device arrays).
struct StepView {
  int64_t n_tokens = 0, n_seqs = 0;
  const int32_t* pos_of_token = nullptr;
  const int32_t* seq_of_token = nullptr;
  const int32_t* seq_first_token = nullptr;  // tokens of a sequence are contiguous
  const int32_t* seq_token_count = nullptr;
  const int32_t* seq_slot = nullptr;
  const int32_t* seq_page_offset = nullptr;  // where a sequence's page table starts in `pages`
  const int32_t* pages = nullptr;
  const int64_t* score_offset = nullptr;  // per token: Σ of earlier tokens' (pos + 1) · n_head
  // Image steps (docs/vision.md §4): per token its t, h and w rotary positions; null for a step
  // of text alone, where every stream is the token's position.
  const int32_t* rope_of_token = nullptr;
  // A speculative step: per token a state slot that receives its sequence's GDN state as it is
  // after that token (-1: none); null for a step without planes.
  const int32_t* plane_of_token = nullptr;
};

// One rank's heads: n_head query heads from q_head_begin, n_head_kv KV heads from
// kv_head_begin; a query head j reads KV head (q_head_begin + j) / group - kv_head_begin.
// How the KV pages store a row (kernels/token_ops.h): fp16 values, or KvQ8 / KvQ4 units of 32.
enum class KvStorage { kFp16, kQ8, kQ4 };

struct AttentionShape {
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  int64_t q_head_begin = 0, kv_head_begin = 0, group = 1;
  float eps = 0.0f, scale = 0.0f;
  int64_t page_size = 0, page_stride = 0;  // positions per page; units from page to page
  KvStorage kv = KvStorage::kFp16;
  const uint8_t* rope_stream_of_pair = nullptr;  // n_rot / 2 streams (device), for image steps
};

// QK-norm and RoPE on every query and key head, then K and V rows into the step's pages of one
// layer in shape.kv's storage (k_layer / v_layer: that layer's K and V rows of page 0).
int AttentionPrepare(const AttentionShape& shape, const StepView& step, float* q_gate, float* k,
                     const float* v, const float* q_norm, const float* k_norm,
                     const double* inv_freq, void* k_layer, void* v_layer, cudaStream_t stream);
// Every (token, head) of tokens [t_begin, t_end) over its sequence's positions 0..pos, gated by
// σ(gate); `scores` holds score_offset[t_end] - score_offset[t_begin] floats.
int Attention(const AttentionShape& shape, const StepView& step, int64_t t_begin, int64_t t_end,
              const float* q_gate, const void* k_layer, const void* v_layer, float* scores,
              float* out, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Gated DeltaNet

// The state of one GDN layer of slot s is at state + s · slot_stride + layer_offset: the conv
// window, then the recurrent state (conv_floats later).
struct GdnStateView {
  float* state = nullptr;
  int64_t slot_stride = 0, layer_offset = 0, conv_floats = 0;
};

// Per sequence, token by token: the conv window, SiLU and the q/k L2 norms into u.
int GdnConv(const GdnLayerParams& p, const StepView& step, GdnStateView state, const float* qkv,
            float* u, cudaStream_t stream);
// Per (sequence, value head), token by token: the delta rule and the gated norm into out.
int GdnRecurrence(const GdnLayerParams& p, const StepView& step, GdnStateView state, const float* u,
                  const float* z, const float* alpha_beta, float* out, cudaStream_t stream);

}  // namespace walsh::cuda

#endif  // WALSH_KERNELS_CUDA_OPS_H_
