// Full attention over paged KV (docs/format.md §8.2), fp16, q8 or q4 pages read directly:
// QK-norm, RoPE (M-RoPE's streams on an image step, docs/vision.md §4), the KV write, then one
// thread block per (token, query head): scores by key in parallel, the softmax's max on a warp and
// its sum in the shared 32 lanes (a lane per thread), outputs by dimension in parallel, each over
// keys in position order — the pieces of kernels/token_ops.h's AttendOneHead.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/warp_lanes.h"

namespace walsh::cuda {
namespace {

// One thread per (token, head) of q (n_head) and k (n_head_kv); then the K and V rows.
template <typename T>
__global__ void PrepareKernel(AttentionShape s, StepView step, float* q_gate, float* k,
                              const float* v, const float* q_norm, const float* k_norm,
                              const double* inv_freq, T* k_layer, T* v_layer) {
  const int64_t t = blockIdx.x;
  const int64_t hd = s.head_dim, kv_dim = s.n_head_kv * hd;
  const int64_t pos = step.pos_of_token[t];
  int32_t streams[4] = {0, 0, 0, 0};
  if (step.rope_of_token != nullptr) {
    for (int i = 0; i < 3; ++i) streams[i] = step.rope_of_token[3 * t + i];
  }
  const auto rope = [&](float* head) {
    if (step.rope_of_token == nullptr) {
      RopeNeoxInPlace(head, s.n_rot, pos, inv_freq);
    } else {
      RopeStreamsInPlace(head, s.n_rot, streams, s.rope_stream_of_pair, inv_freq);
    }
  };
  for (int64_t h = threadIdx.x; h < s.n_head + s.n_head_kv; h += blockDim.x) {
    if (h < s.n_head) {
      float* q = q_gate + t * 2 * s.n_head * hd + h * 2 * hd;
      RmsNorm(q, q_norm, hd, s.eps, q);
      rope(q);
    } else {
      float* kh = k + t * kv_dim + (h - s.n_head) * hd;
      RmsNorm(kh, k_norm, hd, s.eps, kh);
      rope(kh);
    }
  }
  __syncthreads();
  const int32_t seq = step.seq_of_token[t];
  const int32_t page = step.pages[step.seq_page_offset[seq] + pos / s.page_size];
  // A thread per storage unit of the row (a value, or a quantized group of 32).
  constexpr int64_t per_unit = KvValuesPerUnit<T>;
  const int64_t units = kv_dim / per_unit;
  const int64_t at = page * s.page_stride + (pos % s.page_size) * units;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
    KvStoreRow(k + t * kv_dim + u * per_unit, per_unit, k_layer + at + u);
    KvStoreRow(v + t * kv_dim + u * per_unit, per_unit, v_layer + at + u);
  }
}

template <typename T>
__global__ void AttendKernel(AttentionShape s, StepView step, int64_t t_begin, const float* q_gate,
                             const T* k_layer, const T* v_layer, float* scores_all, float* out) {
  const int64_t t = t_begin + blockIdx.x / s.n_head, j = blockIdx.x % s.n_head;
  const int64_t hd = s.head_dim, kv_dim = s.n_head_kv * hd;
  const int64_t n_keys = step.pos_of_token[t] + 1;
  const int32_t seq = step.seq_of_token[t];
  constexpr int64_t per_unit = KvValuesPerUnit<T>;
  const PagedKv<T> kv{k_layer,
                      v_layer,
                      step.pages + step.seq_page_offset[seq],
                      s.page_stride,
                      s.page_size,
                      kv_dim / per_unit,
                      ((s.q_head_begin + j) / s.group - s.kv_head_begin) * hd / per_unit};  // GQA
  const float* q = q_gate + t * 2 * s.n_head * hd + j * 2 * hd;
  const float* g = q + hd;
  float* scores = scores_all + (step.score_offset[t] - step.score_offset[t_begin]) + j * n_keys;
  for (int64_t key = threadIdx.x; key < n_keys; key += blockDim.x) {
    scores[key] = AttentionScore(q, hd, kv, key, s.scale);
  }
  const float sum = BlockSoftmaxNumerators(scores, n_keys);
  float* u = out + t * s.n_head * hd + j * hd;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    const float o = AttentionOutput(scores, sum, kv, n_keys, i);
    u[i] = o * Sigmoid(g[i]);
  }
}

}  // namespace

namespace {

template <typename T>
int Prepare(const AttentionShape& shape, const StepView& step, float* q_gate, float* k,
            const float* v, const float* q_norm, const float* k_norm, const double* inv_freq,
            void* k_layer, void* v_layer, cudaStream_t stream) {
  PrepareKernel<T><<<static_cast<unsigned>(step.n_tokens), 64, 0, stream>>>(
      shape, step, q_gate, k, v, q_norm, k_norm, inv_freq, static_cast<T*>(k_layer),
      static_cast<T*>(v_layer));
  return LastLaunchError();
}

template <typename T>
int Attend(const AttentionShape& shape, const StepView& step, int64_t t_begin, int64_t t_end,
           const float* q_gate, const void* k_layer, const void* v_layer, float* scores, float* out,
           cudaStream_t stream) {
  AttendKernel<T><<<static_cast<unsigned>((t_end - t_begin) * shape.n_head), 256, 0, stream>>>(
      shape, step, t_begin, q_gate, static_cast<const T*>(k_layer), static_cast<const T*>(v_layer),
      scores, out);
  return LastLaunchError();
}

}  // namespace

int AttentionPrepare(const AttentionShape& shape, const StepView& step, float* q_gate, float* k,
                     const float* v, const float* q_norm, const float* k_norm,
                     const double* inv_freq, void* k_layer, void* v_layer, cudaStream_t stream) {
  if (step.n_tokens == 0) return 0;
  switch (shape.kv) {
    case KvStorage::kQ8:
      return Prepare<KvQ8>(shape, step, q_gate, k, v, q_norm, k_norm, inv_freq, k_layer, v_layer,
                           stream);
    case KvStorage::kQ4:
      return Prepare<KvQ4>(shape, step, q_gate, k, v, q_norm, k_norm, inv_freq, k_layer, v_layer,
                           stream);
    case KvStorage::kFp16:
      break;
  }
  return Prepare<uint16_t>(shape, step, q_gate, k, v, q_norm, k_norm, inv_freq, k_layer, v_layer,
                           stream);
}

int Attention(const AttentionShape& shape, const StepView& step, int64_t t_begin, int64_t t_end,
              const float* q_gate, const void* k_layer, const void* v_layer, float* scores,
              float* out, cudaStream_t stream) {
  if (t_end <= t_begin) return 0;
  switch (shape.kv) {
    case KvStorage::kQ8:
      return Attend<KvQ8>(shape, step, t_begin, t_end, q_gate, k_layer, v_layer, scores, out,
                          stream);
    case KvStorage::kQ4:
      return Attend<KvQ4>(shape, step, t_begin, t_end, q_gate, k_layer, v_layer, scores, out,
                          stream);
    case KvStorage::kFp16:
      break;
  }
  return Attend<uint16_t>(shape, step, t_begin, t_end, q_gate, k_layer, v_layer, scores, out,
                          stream);
}

}  // namespace walsh::cuda
