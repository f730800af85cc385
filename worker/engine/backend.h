// The seam between the qwen35 graph (qwen35_graph.h) and a device. A backend owns device memory
// (resident weights, KV pages, GatedDeltaNet state slots, activations) and runs the graph's
// operations on it; the graph is written once against this interface and never touches device
// memory itself. Backends: cpu_backend.h (the reference) and cuda_backend.h.
//
// Exactness: every op reduces in the order kernels/token_ops.h and the ternary kernels fix, so a
// token's result does not depend on the batch, the thread count, or the backend.
//
// Threading: one thread drives a backend; ops are issued in graph order and may run
// asynchronously on the device, in issue order. ReadToHost waits for everything before it.
#ifndef WALSH_WORKER_ENGINE_BACKEND_H_
#define WALSH_WORKER_ENGINE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/block_types.h"
#include "kernels/q8_activation.h"
#include "kernels/token_ops.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/model.h"
#include "worker/parallel/shard_plan.h"

namespace walsh {

// What an activation view holds.
enum class DType {
  kF32,  // floats
  kQ8,   // int8 blocks of 128 with their scales (kernels/q8_activation.h), in a Q8Layout
};

// A view of rows × cols activations in the backend's memory, row-major: floats, or cols / 128
// int8 blocks per row. The graph and the communicator see views, never the memory behind them;
// a view stays valid until the step ends.
struct Tensor {
  void* data = nullptr;
  int64_t rows = 0, cols = 0;
  DType dtype = DType::kF32;
  Q8Layout layout = Q8Layout::kNatural;  // kQ8 only

  float* f32() const { return static_cast<float*>(data); }
  Q8Block128* q8() const { return static_cast<Q8Block128*>(data); }
};

// The activation transform a projection's input gets (docs/format.md §7.2): none, T(s ⊙ x), or
// T(s ⊙ P(x)) with P the GatedDeltaNet value-head permutation. The graph tags inputs with it;
// P is applied by the GatedDeltaNet kernels themselves (they write grouped order), so backends
// are asked only for kPlain or kRotated and refuse kPermutedRotated.
enum class Transform { kPlain, kRotated, kPermutedRotated };

// A step's activation views come from numbered slots (the graph names them: qwen35_graph.h);
// each slot is resized by Activation() and reused by every layer.
inline constexpr int kActivationSlots = 48;

// The bytes a view of rows × cols `dtype` activations takes; refuses a slot out of range and
// int8 rows that are not whole 128-blocks.
inline absl::StatusOr<int64_t> ActivationBytes(int slot, int64_t rows, int64_t cols, DType dtype) {
  if (slot < 0 || slot >= kActivationSlots) {
    return absl::InternalError("activation slot out of range");
  }
  if (dtype == DType::kF32) return rows * cols * static_cast<int64_t>(sizeof(float));
  if (cols % kTernaryBlockElems != 0) {
    return absl::InternalError("int8 activations need whole 128-blocks per row");
  }
  return rows * (cols / kTernaryBlockElems) * static_cast<int64_t>(sizeof(Q8Block128));
}

// The view rows × cols that starts `offset` floats into t's memory (fp32 views only): the one
// place the graph's views are offset.
inline Tensor SubTensor(Tensor t, int64_t offset, int64_t rows, int64_t cols) {
  return {t.f32() + offset, rows, cols};
}

// Rows of a column-parallel product: weight rows [begin, end), or the listed weight rows (the
// list must live as long as the model: a device backend uploads it once).
struct RowSelection {
  int64_t begin = 0, end = 0;
  const std::vector<int32_t>* index = nullptr;

  int64_t count() const {
    return index != nullptr ? static_cast<int64_t>(index->size()) : end - begin;
  }
  static RowSelection All(const Projection& p) { return {0, p.w.rows, nullptr}; }
};

// The query and KV heads of a full-attention layer one rank computes (worker/parallel/
// shard_plan.h); q_gate, k, v and the attention output hold only these heads.
struct AttentionShard {
  int64_t q_head_begin = 0, q_heads = 0, kv_head_begin = 0, kv_heads = 0;
};

// One step, flattened: each sequence's new tokens in order, sequence after sequence.
struct StepPlan {
  std::vector<int32_t> tokens;
  std::vector<int32_t> seq_of_token;            // index into seq_slots / seq_pages
  std::vector<int32_t> pos_of_token;            // position in its sequence
  std::vector<int32_t> seq_slots;               // GatedDeltaNet state slot of each sequence
  std::vector<std::vector<int32_t>> seq_pages;  // KV page table of each sequence
  std::vector<int32_t> logit_tokens;            // tokens whose next-token logits are read back
  // Empty, or per token a state slot (-1: none) that receives a copy of its sequence's
  // GatedDeltaNet state (conv window and recurrent state, every layer) as it is after that
  // token: a speculative step's planes, one of which the sequence rolls back to.
  std::vector<int32_t> plane_of_token;
  // Image inputs (docs/vision.md §4), empty for a step of text alone. rope_of_token: 3 per token,
  // the t, h and w positions of its rotary embedding (a text token's three are its M-RoPE
  // position, which after an image is not its position in the sequence). embedding_of_token: per
  // token -1 (its own embedding) or the row of embedding_rows (embedding_length floats each, shared
  // by every rank) that replaces it.
  std::vector<int32_t> rope_of_token;
  std::vector<int32_t> embedding_of_token;
  std::shared_ptr<const std::vector<float>> embedding_rows;
};

// The sizes of the KV pages and state slots a backend holds (counts from the engine's budget).
struct CacheGeometry {
  int64_t pages = 0, page_size = 0, attention_layers = 0, kv_dim = 0;
  KvCacheDtype kv_dtype = KvCacheDtype::kFp16;
  int64_t slots = 0, gdn_layers = 0, conv_floats = 0, recurrent_floats = 0;

  // A position's K (or V) row in units of the dtype's storage (one value, or 32 for q8 / q4).
  int64_t kv_row_units() const { return KvUnits(kv_dtype, kv_dim); }
  // Units of K and V in one page (every attention layer), and their bytes.
  int64_t page_units() const { return attention_layers * 2 * page_size * kv_row_units(); }
  int64_t page_bytes() const {
    return attention_layers * 2 * page_size * KvBytes(kv_dtype, kv_dim);
  }
  int64_t slot_floats() const { return gdn_layers * (conv_floats + recurrent_floats); }
};

struct BackendMemory {
  int64_t device_used = 0, device_total = 0;  // bytes; 0 total on the CPU
  int64_t weights = 0, kv_cache = 0, state = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual BackendMemory Memory() const = 0;
  // Bytes the KV pages and state slots may take on this device (the CPU: no limit of its own).
  virtual int64_t cache_bytes_available() const { return INT64_MAX; }
  // Whether steps may carry image inputs (StepPlan's rope_of_token and embedding_of_token).
  virtual bool takes_image_inputs() const { return false; }
  // A device backend's device and the stream it computes on (a cudaStream_t), where a rank's
  // collectives join its ops; the CPU has neither (-1, null).
  virtual int device() const { return -1; }
  virtual void* device_stream() const { return nullptr; }

  // Caches: allocated once, zeroed; a state slot is cleared before a new sequence uses it.
  virtual absl::Status AllocateCaches(const CacheGeometry& geometry) = 0;
  virtual absl::Status ClearStateSlot(int32_t slot) = 0;
  // Exact copies between slots and between pages (prefix-cache snapshots and their restore).
  virtual absl::Status CopyStateSlot(int32_t from, int32_t to) = 0;
  virtual absl::Status CopyKvPage(int32_t from, int32_t to) = 0;

  // A view of slot `slot` (0..kActivationSlots-1) for this step, holding `dtype` (contents
  // undefined until written).
  virtual absl::StatusOr<Tensor> Activation(int slot, int64_t rows, int64_t cols,
                                            DType dtype = DType::kF32,
                                            Q8Layout layout = Q8Layout::kNatural) = 0;

  // Makes the step's tokens, positions, page tables and slots visible to the ops below.
  virtual absl::Status BeginStep(const StepPlan& plan) = 0;

  // out[t] = the embedding row of token t, with the inverse transform s ⊙ T(e) when the rows
  // are stored rotated (signs may be null); or the plan's image row that replaces it, as it is.
  virtual absl::Status Embed(const TernaryWeights& table, bool rotated, const int8_t* signs,
                             Tensor out) = 0;
  virtual absl::Status RmsNorm(Tensor x, const float* weight, float eps, Tensor out) = 0;
  // out[i] = x[plan.logit_tokens[i]].
  virtual absl::Status GatherLogitRows(Tensor x, Tensor out) = 0;
  virtual absl::Status AddInPlace(Tensor acc, Tensor x) = 0;
  virtual absl::Status SwiGlu(Tensor gate, Tensor up, Tensor out) = 0;

  // The signed blocked FWHT (kRotated; kPlain: none) of fp32 x into out: fused with the int8
  // quantization in out.layout when out is kQ8 (activation quantization off: kF32).
  virtual absl::Status Rotate(Tensor x, Transform t, const int8_t* signs, Tensor out) = 0;
  // Column-parallel: y[t][i] = W[row i of `rows`] · x[t] over the whole input, on packed
  // ternary weights, from int8 (kQ8) or fp32 activations.
  virtual absl::Status MatMul(const Projection& p, Tensor x, const RowSelection& rows,
                              Tensor y) = 0;
  // Row-parallel: for each input column window slices[s] (whole 128-blocks, in order, tiling
  // one range), every row's sum over the window's blocks into partials[s]; x (kQ8 or kF32)
  // holds the input columns from x_first_col on.
  virtual absl::Status MatMulSlices(const Projection& p, Tensor x, int64_t x_first_col,
                                    const std::vector<Span>& slices,
                                    const std::vector<Tensor>& partials) = 0;
  // out = the pairwise tree over the leaves (a power of two of them), elementwise:
  // ((l0 + l1) + (l2 + l3)) + ... out may alias a leaf.
  virtual absl::Status TreeSum(const std::vector<Tensor>& leaves, Tensor out) = 0;
  // y[t][col_offset + i] = W[row i of `rows`] · x[t] for a small dense matrix (ssm_alpha /
  // ssm_beta).
  virtual absl::Status DenseProject(const DenseWeight& w, Tensor x, const RowSelection& rows,
                                    Tensor y, int64_t col_offset) = 0;
  // out = x's columns [col_begin, col_begin + out.cols); or x written into out's columns from
  // col_begin on.
  virtual absl::Status CopyColumns(Tensor x, int64_t col_begin, Tensor out) = 0;
  virtual absl::Status PlaceColumns(Tensor x, Tensor out, int64_t col_begin) = 0;
  // GatedDeltaNet outputs from grouped to tiled value-head order (n_k key heads of rep value
  // heads of width hd), for ssm_out weights folded without the grouping.
  virtual absl::Status Ungroup(Tensor x, int64_t n_k, int64_t rep, int64_t hd, Tensor out) = 0;

  // Full attention (docs/format.md §8.2): QK-norm and RoPE on q and k, K and V into the step's
  // pages; then every (token, head) attends over its sequence's positions and is gated.
  virtual absl::Status AttentionPrepare(const AttentionWeights& w, int64_t layer,
                                        const AttentionShard& heads, Tensor q_gate, Tensor k,
                                        Tensor v) = 0;
  virtual absl::Status Attention(int64_t layer, const AttentionShard& heads, Tensor q_gate,
                                 Tensor out) = 0;

  // Gated DeltaNet (docs/format.md §8.3) on the rank's heads (`p`; its weight pointers stay
  // valid for the model's life): the causal conv through each sequence's window, then the
  // delta rule token by token per sequence, value heads in parallel.
  virtual absl::Status GdnConv(const GdnLayerParams& p, int64_t layer, Tensor qkv, Tensor u) = 0;
  virtual absl::Status GdnRecurrence(const GdnLayerParams& p, int64_t layer, Tensor u, Tensor z,
                                     Tensor alpha_beta, Tensor out) = 0;

  // Copies a tensor to the host, after every op issued before it has finished.
  virtual absl::Status ReadToHost(Tensor x, float* host) = 0;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_BACKEND_H_
