// The x86 ternary kernel, written once for the AVX2 and AVX-512 VNNI files that include it:
// they differ only in the integer dot product of a block's codes with a token's int8
// activations (the `Dot` policy), so the float steps are the same instructions in the same
// order (kernels/ternary_block_combine.h).
//
// Shape of the work. A row tile of R rows meets a token tile of T tokens: each block of each
// row is decoded once into four 32-byte code vectors and used for all T tokens, and each
// activation block, once loaded, serves all R rows. A (row, token) pair keeps its eight group
// accumulators in one register, so a block costs one convert, one multiply and one FMA per
// pair and no horizontal sum; the eight lanes join once per window. One token runs R = 4 rows
// (four FMA chains in flight); several run R = 2 rows by up to kTokenTile tokens, over row
// chunks small enough that their weights stay in cache while every token tile passes.
//
// Everything here has internal linkage on purpose: each including file is compiled for its own
// ISA, and a shared inline definition could otherwise be linked from the wrong one.
#ifndef WALSH_KERNELS_CPU_TERNARY_KERNEL_X86_H_
#define WALSH_KERNELS_CPU_TERNARY_KERNEL_X86_H_

#include <immintrin.h>

#include <algorithm>

#include "kernels/block_types.h"
#include "kernels/q8_activation.h"
#include "kernels/ternary_product.h"

namespace walsh {
namespace {

// Four 32-byte code vectors of one block (codes 0..3, value + 1) and its scale in all lanes.
// Byte k of int32 lane L of vector v meets position 32v + 4L + k of the format's activation
// layout, and every lane L holds one group (Q8LaneGroup), so a dot product's lanes are group
// sums with no horizontal step.
struct BlockCodes {
  __m256i c[4];
  __m256 dw;
};

// PQ2_0: shifting the 32 code bytes by 0, 2, 4, 6 bits gives four planes; plane p, byte m is
// element 4m + p, which is where kPq2Planes activations put it. Int32 lane j of every plane
// holds group j.
inline BlockCodes DecodePq2(const block_pq2_0& blk) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
  BlockCodes out;
  out.c[0] = _mm256_and_si256(qs, m3);
  out.c[1] = _mm256_and_si256(_mm256_srli_epi16(qs, 2), m3);
  out.c[2] = _mm256_and_si256(_mm256_srli_epi16(qs, 4), m3);
  out.c[3] = _mm256_and_si256(_mm256_srli_epi16(qs, 6), m3);
  out.dw = _mm256_set1_ps(_cvtsh_ss(blk.d));  // F16C: exact, as Fp16ToFloat
  return out;
}

// PTQ1_0: digit n of byte b is ((b · 3^n) mod 256) · 3 >> 8. With b in the high byte of a
// 16-bit lane, mullo by 3^n leaves (b · 3^n mod 256) << 8 and mulhi by 3 yields the digit.
// The trits come out in element order, one sub-block per vector (assembled in registers: going
// through memory would stall on store forwarding), and are then transposed so that int32 lane L
// of vector v holds elements 4v .. 4v+3 of group Q8LaneGroup(kPtq1Lanes, L): every vector then
// meets the same groups in the same lanes, as PQ2_0's planes do.
inline __m256i Digits16(__m256i high, int16_t pow3) {
  return _mm256_mulhi_epu16(_mm256_mullo_epi16(high, _mm256_set1_epi16(pow3)),
                            _mm256_set1_epi16(3));
}

inline __m128i Digits8(__m128i high, __m128i pow3) {
  return _mm_mulhi_epu16(_mm_mullo_epi16(high, pow3), _mm_set1_epi16(3));
}

// Two 16-lane digit vectors -> 32 bytes in element order.
inline __m256i Pack32(__m256i a, __m256i b) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xd8);
}

inline __m128i Pack16(__m256i a) {
  return _mm_packus_epi16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
}

inline BlockCodes DecodePtq1(const block_ptq1_0& blk) {
  // Stage 1: qs[0..15], digit n of byte m is element 16n + m.
  const __m256i h1 = _mm256_slli_epi16(
      _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs))), 8);
  // Stage 2: qs[16..23], digit n of byte m is element 80 + 8n + m.
  const __m128i h2 = _mm_slli_epi16(
      _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.qs + 16))), 8);
  // qh: digit n of byte j is element 120 + 2n + j; lanes [j=0, j=1] x n = 0..3.
  const __m128i hq = _mm_slli_epi16(_mm_setr_epi16(blk.qh[0], blk.qh[1], blk.qh[0], blk.qh[1],
                                                   blk.qh[0], blk.qh[1], blk.qh[0], blk.qh[1]),
                                    8);
  // Sub-block k: group 2k in the low 128 bits, 2k + 1 in the high.
  const __m256i c0 = Pack32(Digits16(h1, 1), Digits16(h1, 3));
  const __m256i c1 = Pack32(Digits16(h1, 9), Digits16(h1, 27));
  const __m128i s0 = Digits8(h2, _mm_set1_epi16(1)), s1 = Digits8(h2, _mm_set1_epi16(3));
  const __m128i s2 = Digits8(h2, _mm_set1_epi16(9)), s3 = Digits8(h2, _mm_set1_epi16(27));
  const __m128i s4 = Digits8(h2, _mm_set1_epi16(81));
  const __m128i q = Digits8(hq, _mm_setr_epi16(1, 1, 3, 3, 9, 9, 27, 27));
  const __m256i c2 = _mm256_set_m128i(_mm_packus_epi16(s0, s1), Pack16(Digits16(h1, 81)));
  const __m256i c3 = _mm256_set_m128i(_mm_packus_epi16(s4, q), _mm_packus_epi16(s2, s3));
  // A 4 x 4 transpose of int32 words within each 128-bit half: half h of out.c[v] becomes word v
  // of groups h, 2 + h, 4 + h, 6 + h.
  const __m256i a01 = _mm256_unpacklo_epi32(c0, c1), b01 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i a23 = _mm256_unpacklo_epi32(c2, c3), b23 = _mm256_unpackhi_epi32(c2, c3);
  BlockCodes out;
  out.c[0] = _mm256_unpacklo_epi64(a01, a23);
  out.c[1] = _mm256_unpackhi_epi64(a01, a23);
  out.c[2] = _mm256_unpacklo_epi64(b01, b23);
  out.c[3] = _mm256_unpackhi_epi64(b01, b23);
  out.dw = _mm256_set1_ps(_cvtsh_ss(blk.d));
  return out;
}

template <TernaryFormat F>
inline BlockCodes DecodeBlock(const uint8_t* row, int64_t b) {
  if constexpr (F == TernaryFormat::kPq2_0) {
    return DecodePq2(reinterpret_cast<const block_pq2_0*>(row)[b]);
  } else {
    return DecodePtq1(reinterpret_cast<const block_ptq1_0*>(row)[b]);
  }
}

// ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) over groups, from lanes in the format's order.
template <TernaryFormat F>
inline float JoinLanes(__m256 acc) {
  const __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  // Pairs (g0 + g1, g2 + g3, g4 + g5, g6 + g7): adjacent lanes in kPq2Planes' order, the two
  // halves in kPtq1Lanes'.
  const __m128 pairs = F == TernaryFormat::kPq2_0 ? _mm_hadd_ps(lo, hi) : _mm_add_ps(lo, hi);
  const __m128 quads = _mm_hadd_ps(pairs, pairs);
  return _mm_cvtss_f32(quads) + _mm_cvtss_f32(_mm_shuffle_ps(quads, quads, 1));
}

// One (row, token) step of a block: acc = fma(float(raw − Σq), dw · dx, acc), lane by lane.
inline __m256 Accumulate(__m256 acc, __m256i raw, const BlockCodes& w, const Q8Block128& xb) {
  const __m256i isum =
      _mm256_sub_epi32(raw, _mm256_load_si256(reinterpret_cast<const __m256i*>(xb.sum)));
  const __m256 scale = _mm256_mul_ps(w.dw, _mm256_load_ps(xb.d));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc);
}

// R rows by T tokens (tokens t0 .. t0 + T − 1, local rows i .. i + R − 1), every segment.
template <class Dot, TernaryFormat F, int R, int T>
void Tile(const TernaryProduct& p, int64_t i, int64_t t0) {
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) {
    const int64_t w = p.row_index != nullptr ? p.row_index[i + r] : p.row_first + i + r;
    rows[r] = p.w.data + w * p.w.row_bytes();
  }
  const Q8Block128* x0 = p.x + t0 * p.x_stride - p.x_first_block;
  for (int s = 0; s < p.n_segments; ++s) {
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    }
    for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) {
      for (int r = 0; r < R; ++r) {
        const BlockCodes w = DecodeBlock<F>(rows[r], b);
        for (int t = 0; t < T; ++t) {
          const Q8Block128& xb = x0[t * p.x_stride + b];
          acc[r][t] = Accumulate(acc[r][t], Dot::Sums(w, xb.qs), w, xb);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) p.y[s][(t0 + t) * p.y_stride + i + r] = JoinLanes<F>(acc[r][t]);
    }
  }
}

// Tokens [t0, t0 + n) for local rows [i, i + R), n <= kTokenTile, by a tile of exactly n tokens.
template <class Dot, TernaryFormat F, int R, int N = Dot::kTokenTile>
void TokenRun(const TernaryProduct& p, int64_t i, int64_t t0, int n) {
  if constexpr (N > 0) {
    if (n == N) return Tile<Dot, F, R, N>(p, i, t0);
    TokenRun<Dot, F, R, N - 1>(p, i, t0, n);
  }
}

template <class Dot, TernaryFormat F>
void MatMul(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  if (p.n_tokens == 1) {
    int64_t i = row_begin;
    for (; i + 4 <= row_end; i += 4) Tile<Dot, F, 4, 1>(p, i, 0);
    for (; i < row_end; ++i) Tile<Dot, F, 1, 1>(p, i, 0);
    return;
  }
  // Rows in chunks whose weights stay in L2 while every token tile passes over them.
  constexpr int64_t kRowChunk = 16;
  for (int64_t c0 = row_begin; c0 < row_end; c0 += kRowChunk) {
    const int64_t c1 = std::min(row_end, c0 + kRowChunk);
    for (int64_t t0 = 0; t0 < p.n_tokens; t0 += Dot::kTokenTile) {
      const int n = static_cast<int>(std::min<int64_t>(Dot::kTokenTile, p.n_tokens - t0));
      int64_t i = c0;
      for (; i + 2 <= c1; i += 2) TokenRun<Dot, F, 2>(p, i, t0, n);
      for (; i < c1; ++i) TokenRun<Dot, F, 1>(p, i, t0, n);
    }
  }
}

template <class Dot>
void MatMulAnyFormat(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  switch (p.w.format) {
    case TernaryFormat::kPq2_0:
      return MatMul<Dot, TernaryFormat::kPq2_0>(p, row_begin, row_end);
    case TernaryFormat::kPtq1_0:
      return MatMul<Dot, TernaryFormat::kPtq1_0>(p, row_begin, row_end);
  }
}

}  // namespace
}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_TERNARY_KERNEL_X86_H_
