// AttendQueryBlock with AVX2, bit for bit with the portable path. Scores: four queries at a
// time over a panel of 16 keys, one broadcast of a query's dimension times two vectors of the
// panel per step, so each lane sums its key's products in dimension order. Softmax:
// softmax_avx2.h. Weighted values: keys in chunks small enough to stay in L1 while each query
// of the block takes them; up to 96 of a query's dimensions stay in registers across a chunk and
// go through memory between chunks (a store and a load change no bits), so each dimension still
// sums its keys in order.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/query_block_attention.h"
#include "kernels/cpu/softmax_avx2.h"
#include "kernels/cpu/width_dispatch.h"

namespace walsh {
namespace {

constexpr int64_t kValueChunk = 48;  // 48 keys x 72 dimensions x 4 bytes = 13.5 KiB

// scores[j] + 16p .. for every panel p, for queries q[0 .. kQueries).
template <int kQueries>
void ScorePanels(const QueryBlockHead& head, const float* const* q, float scale,
                 float* const* scores) {
  const int64_t hd = head.head_dim;
  const __m256 scale_v = _mm256_set1_ps(scale);
  for (int64_t p = 0; p < KeyPanelCount(head.n_keys); ++p) {
    const float* panel = head.key_panels + p * kKeyPanel * hd;
    __m256 acc[kQueries][2];
    for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd; ++i) {
      const __m256 k0 = _mm256_loadu_ps(panel + i * kKeyPanel);
      const __m256 k1 = _mm256_loadu_ps(panel + i * kKeyPanel + 8);
      for (int j = 0; j < kQueries; ++j) {
        const __m256 qi = _mm256_broadcast_ss(q[j] + i);
        acc[j][0] = _mm256_add_ps(acc[j][0], _mm256_mul_ps(qi, k0));
        acc[j][1] = _mm256_add_ps(acc[j][1], _mm256_mul_ps(qi, k1));
      }
    }
    for (int j = 0; j < kQueries; ++j) {
      _mm256_storeu_ps(scores[j] + p * kKeyPanel, _mm256_mul_ps(acc[j][0], scale_v));
      _mm256_storeu_ps(scores[j] + p * kKeyPanel + 8, _mm256_mul_ps(acc[j][1], scale_v));
    }
  }
}

// out[i0 .. i0 + 8·kVectors) += Σ_{t0 <= τ < t1} weights_τ · v_τ[i], in key order; the sums
// start from zero at the first chunk.
template <int kVectors>
void WeightedValueChunk(const QueryBlockHead& head, const float* weights, int64_t t0, int64_t t1,
                        int64_t i0, float* out) {
  __m256 acc[kVectors];
  for (int k = 0; k < kVectors; ++k) {
    acc[k] = t0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + i0 + 8 * k);
  }
  for (int64_t t = t0; t < t1; ++t) {
    const __m256 weight = _mm256_broadcast_ss(weights + t);
    const float* v = head.values + t * head.value_stride + i0;
    for (int k = 0; k < kVectors; ++k) {
      acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(weight, _mm256_loadu_ps(v + 8 * k)));
    }
  }
  for (int k = 0; k < kVectors; ++k) _mm256_storeu_ps(out + i0 + 8 * k, acc[k]);
}

// A head's dimensions in as few passes as hold their vectors in registers (up to 12 of the 16),
// split evenly: a pass of one or two vectors would wait on its adds' latency, key after key.
void WeightedValues(const QueryBlockHead& head, const float* weights, int64_t t0, int64_t t1,
                    float* out) {
  constexpr int64_t kMaxVectors = 12;
  const int64_t vectors = head.head_dim / 8;
  const int64_t passes = (vectors + kMaxVectors - 1) / kMaxVectors;
  for (int64_t p = 0, i0 = 0; p < passes; ++p) {
    const int64_t width = (vectors - i0 / 8 + (passes - p) - 1) / (passes - p);
    DispatchWidth<kMaxVectors>(width, [&](auto vectors) {
      WeightedValueChunk<decltype(vectors)::value>(head, weights, t0, t1, i0, out);
    });
    i0 += 8 * width;
  }
}

}  // namespace

bool AttendQueryBlockAvx2(const QueryBlockHead& head, const float* q, int64_t q_stride,
                          int64_t n_queries, float scale, float* scores, float* out,
                          int64_t out_stride) {
  if (head.head_dim % 8 != 0) return false;
  const int64_t n = head.n_keys, row = KeyPanelCount(n) * kKeyPanel;
  int64_t j = 0;
  for (; j < n_queries; j += 4) {
    const float* qs[4];
    float* ss[4];
    const int count = static_cast<int>(std::min<int64_t>(4, n_queries - j));
    for (int r = 0; r < count; ++r) qs[r] = q + (j + r) * q_stride, ss[r] = scores + (j + r) * row;
    DispatchWidth<4>(
        count, [&](auto queries) { ScorePanels<decltype(queries)::value>(head, qs, scale, ss); });
  }
  for (j = 0; j < n_queries; ++j) SoftmaxWeightsAvx2(scores + j * row, n);
  for (int64_t t0 = 0; t0 < n; t0 += kValueChunk) {
    const int64_t t1 = std::min(n, t0 + kValueChunk);
    for (j = 0; j < n_queries; ++j) {
      WeightedValues(head, scores + j * row, t0, t1, out + j * out_stride);
    }
  }
  if (n == 0) {
    for (j = 0; j < n_queries; ++j) std::fill_n(out + j * out_stride, head.head_dim, 0.0f);
  }
  return true;
}

}  // namespace walsh
