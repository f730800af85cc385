// Attention of a block of queries over the same keys and values of one head, all of them (no
// causal mask): the vision encoder's (docs/vision.md §3). Every query's output is
// AttendOneHead's (kernels/token_ops.h) bit for bit: its scores dot products in dimension order,
// its softmax, its weighted values summed in key order. What differs is the memory each key
// costs: the keys are packed in panels of kKeyPanel keys, dimension-major, so one load serves a
// panel's keys and a block of queries at once, and the values are read in chunks that stay in
// cache while every query of the block takes them.
#ifndef WALSH_KERNELS_CPU_QUERY_BLOCK_ATTENTION_H_
#define WALSH_KERNELS_CPU_QUERY_BLOCK_ATTENTION_H_

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace walsh {

inline constexpr int64_t kKeyPanel = 16;

inline int64_t KeyPanelCount(int64_t n_keys) { return (n_keys + kKeyPanel - 1) / kKeyPanel; }

// Floats of panels that hold n_keys keys of head_dim: panel p holds keys p·kKeyPanel onward as
// [head_dim][kKeyPanel], zero past the last key.
inline int64_t KeyPanelFloats(int64_t n_keys, int64_t head_dim) {
  return KeyPanelCount(n_keys) * kKeyPanel * head_dim;
}

// Key t's dimensions at keys + t·key_stride -> panels (KeyPanelFloats floats).
void PackKeyPanels(const float* keys, int64_t key_stride, int64_t n_keys, int64_t head_dim,
                   float* panels);

// One head's keys, packed, and its values: value t at values + t·value_stride.
struct QueryBlockHead {
  const float* key_panels;
  const float* values;
  int64_t value_stride;
  int64_t n_keys;
  int64_t head_dim;
};

// out + j·out_stride = AttendOneHead(q + j·q_stride) over the head's keys, for j < n_queries.
// scores: n_queries · KeyPanelCount(n_keys) · kKeyPanel floats of scratch.
void AttendQueryBlock(CpuIsa isa, const QueryBlockHead& head, const float* q, int64_t q_stride,
                      int64_t n_queries, float scale, float* scores, float* out,
                      int64_t out_stride);

// The portable path, and the AVX2 one (false where head_dim is not a multiple of 8).
void AttendQueryBlockScalar(const QueryBlockHead& head, const float* q, int64_t q_stride,
                            int64_t n_queries, float scale, float* scores, float* out,
                            int64_t out_stride);
bool AttendQueryBlockAvx2(const QueryBlockHead& head, const float* q, int64_t q_stride,
                          int64_t n_queries, float scale, float* scores, float* out,
                          int64_t out_stride);

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_QUERY_BLOCK_ATTENTION_H_
