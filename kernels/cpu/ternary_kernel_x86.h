// The x86 ternary kernel, written once for ternary_matmul_avx2.cc and the AVX-512 header
// ternary_kernel_vnni.h that include it: they differ in how a block's codes are decoded and
// meet a token's int8 activations, and in how many (row, token) pairs share a float register
// (Dot::Accumulators: TokenAccumulators here, over Dot::Decode and Dot::Sums; the VNNI header's
// own); the float steps are the same operations in the same order, lane by lane
// (kernels/ternary_block_combine.h).
//
// Shape of the work. A row tile of R rows meets a token tile of T tokens: each block of each
// row is decoded once (into four 32-byte code vectors, or two 64-byte ones) and used for all T
// tokens, and each activation block, once loaded, serves all R rows (from L1 for every row
// after the first). A (row, token) pair keeps its eight group accumulators in one 256-bit
// register, or half a 512-bit one (the VNNI header pairs rows, or for PTQ1_0 tokens), so a block
// costs one convert, one multiply and one FMA per register and no horizontal sum; the eight lanes
// join once per window. One token runs R = 4 rows (four FMA chains in flight, two where rows
// pair); several run the ISA's Dot::kTile<F> (rows by tokens), over row chunks small enough that
// their weights stay in cache while every token tile passes.
//
// Everything here has internal linkage on purpose: each including file is compiled for its own
// ISA, and a shared inline definition could otherwise be linked from the wrong one.
#ifndef WALSH_KERNELS_CPU_TERNARY_KERNEL_X86_H_
#define WALSH_KERNELS_CPU_TERNARY_KERNEL_X86_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/block_types.h"
#include "kernels/q8_activation.h"
#include "kernels/ternary_block_decode.h"
#include "kernels/ternary_product.h"

namespace walsh {
namespace {

// How far ahead of a row's current block a tile prefetches (the one-token kernel always, the
// multi-token one on its first token tile, the one that meets the weights first): one row tile
// streams several rows at once, too few loads in flight for the hardware prefetchers alone to
// reach the read bandwidth (bench/RESULTS.md: 14 -> 20 of 23 GB/s streaming PQ2_0 on 2 cores). Past
// a row's end it fetches the rows that follow, the next tile's; a prefetch never faults.
inline constexpr int64_t kPrefetchAhead = 8192;

struct TileShape {
  int rows, tokens;
};

// Four 32-byte code vectors of one block (codes 0..3, value + 1) and its scale in all lanes.
// Byte k of int32 lane L of vector v meets position 32v + 4L + k of the format's activation
// layout, and every lane L holds one group (Q8LaneGroup), so a dot product's lanes are group
// sums with no horizontal step. The VNNI header holds the same vectors two to a 512-bit register:
// one row's two (WideCodes) or two rows' one (RowPairCodes).
struct BlockCodes {
  __m256i c[4];
  __m256 dw;
};

// PQ2_0: shifting the 32 code bytes by 0, 2, 4, 6 bits gives four planes; plane p, byte m is
// element 4m + p, which is where kPq2Planes activations put it. Int32 lane j of every plane
// holds group j.
[[gnu::always_inline]] inline BlockCodes DecodePq2(const block_pq2_0& blk) {
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

// PTQ1_0: digit n of byte b is ((b · 3^n) mod 256) · 3 >> 8 (DecodeTrit). With b in the high
// byte of a 16-bit lane, mullo by 3^n leaves (b · 3^n mod 256) << 8 and mulhi by 3 yields the
// digit. Code vector v is packus(A, B) of two such word vectors, so A's words become bytes 0..7
// and 16..23 of the vector and B's bytes 8..15 and 24..31. Each word's source byte is gathered
// by one byte shuffle per 128-bit half, straight into the position kPtq1Lanes gives its element
// (Ptq1TritAt), so no codes move after they are decoded. In vector v every source byte lies in
// the block's bytes 4v..4v+3 or 16..25 (qs[16..23] and qh); each half of the shuffle's source
// holds bytes 4v..4v+3, then 16..27 (Ptq1Source).
// Indexed [A or B][v], so that two vectors' controls are adjacent for 512-bit decodes.
struct Ptq1Gather {
  alignas(64) int8_t shuffle[2][4][32];  // source byte of each word's high byte
  alignas(64) int16_t pow3[2][4][16];    // 3^digit of each word
  bool sources_fit = true;
};

constexpr Ptq1Gather MakePtq1Gather() {
  constexpr int16_t kPow3[5] = {1, 3, 9, 27, 81};
  Ptq1Gather g{};
  for (int v = 0; v < 4; ++v) {
    for (int x = 0; x < 2; ++x) {
      for (int half = 0; half < 2; ++half) {
        for (int w = 0; w < 8; ++w) {
          const int position = 32 * v + 16 * half + 8 * x + w;
          const Ptq1TritPlace at = Ptq1TritAt(Q8ElementAt(Q8Layout::kPtq1Lanes, position));
          int source = -1;  // index in Ptq1Source's half: bytes 4v..4v+3, then 16..27
          if (at.byte >= 4 * v && at.byte < 4 * v + 4) source = at.byte - 4 * v;
          if (at.byte >= 16) source = 4 + at.byte - 16;
          if (source < 0) g.sources_fit = false;
          g.shuffle[x][v][16 * half + 2 * w] = -1;  // the low byte: zero
          g.shuffle[x][v][16 * half + 2 * w + 1] = static_cast<int8_t>(source);
          g.pow3[x][v][8 * half + w] = kPow3[at.digit];
        }
      }
    }
  }
  return g;
}

inline constexpr Ptq1Gather kPtq1Gather = MakePtq1Gather();
static_assert(kPtq1Gather.sources_fit, "a PTQ1_0 code lies outside its vector's source bytes");

// The block's bytes 12..27 in both 128-bit halves: Ptq1Source's shared load.
[[gnu::always_inline]] inline __m256i Ptq1Bytes12To27(const block_ptq1_0& blk) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(
      reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(&blk) + 12)));
}

// Both 128-bit halves: the block's bytes 4v..4v+3, then 16..27 (one broadcast load each, the
// second shared by all four vectors; bytes 12..15 of it are replaced).
[[gnu::always_inline]] inline __m256i Ptq1Source(const block_ptq1_0& blk, __m256i bytes12to27,
                                                 int v) {
  int32_t word;
  std::memcpy(&word, blk.qs + 4 * v, sizeof(word));
  return _mm256_blend_epi32(_mm256_set1_epi32(word), bytes12to27, 0xee);
}

[[gnu::always_inline]] inline __m256i Ptq1Digits(__m256i source, const int8_t* shuffle,
                                                 const int16_t* pow3) {
  const __m256i high =
      _mm256_shuffle_epi8(source, _mm256_load_si256(reinterpret_cast<const __m256i*>(shuffle)));
  return _mm256_mulhi_epu16(
      _mm256_mullo_epi16(high, _mm256_load_si256(reinterpret_cast<const __m256i*>(pow3))),
      _mm256_set1_epi16(3));
}

[[gnu::always_inline]] inline BlockCodes DecodePtq1(const block_ptq1_0& blk) {
  const __m256i bytes12to27 = Ptq1Bytes12To27(blk);
  BlockCodes out;
  for (int v = 0; v < 4; ++v) {
    const __m256i source = Ptq1Source(blk, bytes12to27, v);
    out.c[v] =
        _mm256_packus_epi16(Ptq1Digits(source, kPtq1Gather.shuffle[0][v], kPtq1Gather.pow3[0][v]),
                            Ptq1Digits(source, kPtq1Gather.shuffle[1][v], kPtq1Gather.pow3[1][v]));
  }
  out.dw = _mm256_set1_ps(_cvtsh_ss(blk.d));
  return out;
}

// The decodes are always inlined: GCC once kept them out of line in the VNNI file, which cost a
// call, a vzeroupper and the codes' round trip through memory per row and block.
template <TernaryFormat F>
[[gnu::always_inline]] inline BlockCodes DecodeBlock(const uint8_t* row, int64_t b) {
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

// One (row, token) step of a block: acc = fma(float(Σ (code − 1) · q), dw · dx, acc), lane by
// lane; the dot product starts from the block's −Σq, which turns codes back into values.
template <class Dot, class Codes>
inline __m256 Accumulate(__m256 acc, const Codes& w, const Q8Block128& xb) {
  const __m256i start = _mm256_load_si256(reinterpret_cast<const __m256i*>(xb.minus_sum));
  const __m256i isum = Dot::Sums(start, w, xb.qs);
  const __m256 scale = _mm256_mul_ps(w.dw, _mm256_load_ps(xb.d));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc);
}

// R rows by T tokens of accumulators, one 256-bit register per (row, token); acc[r · stride + t]
// in memory. A Dot names its accumulators (Dot::Accumulators<F, R, T>): these, or the VNNI
// header's, which hold two rows (PQ2_0) or two tokens (PTQ1_0; at one token, two rows) per
// 512-bit register.
template <class Dot, int R, int T>
struct TokenAccumulators {
  __m256 a[R][T];

  [[gnu::always_inline]] void Load(const __m256* acc, int stride) {
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) a[r][t] = acc[r * stride + t];
    }
  }
  [[gnu::always_inline]] void Store(__m256* acc, int stride) const {
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r * stride + t] = a[r][t];
    }
  }
  // Block b of each row meets the same block of every token, x[t · x_stride]: a row's codes are
  // decoded just before their use, so few registers hold codes (AVX2 has 16).
  template <TernaryFormat F>
  [[gnu::always_inline]] void AddBlock(const uint8_t* const* rows, int64_t b, const Q8Block128* x,
                                       int64_t x_stride) {
    for (int r = 0; r < R; ++r) {
      const auto w = Dot::template Decode<F>(rows[r], b);
      for (int t = 0; t < T; ++t) a[r][t] = Accumulate<Dot>(a[r][t], w, x[t * x_stride]);
    }
  }
};

// Blocks [b0, b1) of R rows by T tokens (tokens t0 .. t0 + T − 1), continuing the accumulators
// acc[r · acc_stride + t], which stay in registers meanwhile.
template <class Dot, TernaryFormat F, int R, int T, bool kPrefetch>
void Tile(const TernaryProduct& p, const uint8_t* const* rows, int64_t t0, int64_t b0, int64_t b1,
          __m256* acc, int acc_stride) {
  // Block b of token t0 + t is xt[t · x_stride + b − x_first_block] (no pointer before p.x).
  const Q8Block128* xt = p.x + t0 * p.x_stride;
  typename Dot::template Accumulators<F, R, T> a;
  a.Load(acc, acc_stride);
  constexpr int64_t kBlockBytes =
      F == TernaryFormat::kPq2_0 ? sizeof(block_pq2_0) : sizeof(block_ptq1_0);
  for (int64_t b = b0; b < b1; ++b) {
    if constexpr (kPrefetch) {
      for (int r = 0; r < R; ++r) {
        // Integer arithmetic: the address may lie past the matrix, where a pointer may not.
        const uintptr_t ahead =
            reinterpret_cast<uintptr_t>(rows[r]) + b * kBlockBytes + kPrefetchAhead;
        _mm_prefetch(reinterpret_cast<const char*>(ahead), T == 1 ? _MM_HINT_T0 : _MM_HINT_T1);
      }
    }
    a.template AddBlock<F>(rows, b, xt + (b - p.x_first_block), p.x_stride);
  }
  a.Store(acc, acc_stride);
}

// The same for exactly n <= N tokens.
template <class Dot, TernaryFormat F, int R, int N>
void TokenRun(const TernaryProduct& p, const uint8_t* const* rows, int64_t t0, int n, int64_t b0,
              int64_t b1, __m256* acc, int acc_stride, bool prefetch) {
  if constexpr (N > 0) {
    if (n == N) {
      if (prefetch) return Tile<Dot, F, R, N, true>(p, rows, t0, b0, b1, acc, acc_stride);
      return Tile<Dot, F, R, N, false>(p, rows, t0, b0, b1, acc, acc_stride);
    }
    TokenRun<Dot, F, R, N - 1>(p, rows, t0, n, b0, b1, acc, acc_stride, prefetch);
  }
}

inline const uint8_t* RowData(const TernaryProduct& p, int64_t i) {
  const int64_t w = p.row_index != nullptr ? p.row_index[i] : p.row_first + i;
  return p.w.data + w * p.w.row_bytes();
}

// One token: 4 rows at a time over each whole segment, accumulators in registers.
template <class Dot, TernaryFormat F>
void MatVec(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  for (int64_t i = row_begin; i < row_end;) {
    const int rows_here = row_end - i >= 4 ? 4 : 1;
    const uint8_t* rows[4];
    for (int r = 0; r < rows_here; ++r) rows[r] = RowData(p, i + r);
    for (int s = 0; s < p.n_segments; ++s) {
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      if (rows_here == 4) {
        Tile<Dot, F, 4, 1, true>(p, rows, 0, p.segment_begin[s], p.segment_end[s], acc, 1);
      } else {
        Tile<Dot, F, 1, 1, true>(p, rows, 0, p.segment_begin[s], p.segment_end[s], acc, 1);
      }
      for (int r = 0; r < rows_here; ++r) p.y[s][i + r] = JoinLanes<F>(acc[r]);
    }
    i += rows_here;
  }
}

// Several tokens: rows in chunks of kRowChunk whose weights stay in L2 while every token tile
// passes; within a chunk, blocks in runs of kBlockRun, so the token tile's activations for the
// run (at most 16 · 8 · 192 bytes) stay in L1 while every row of the chunk meets them. Each
// accumulator still takes its blocks in order: it waits in memory between runs.
// Dot::kTile<F> is the tile's {rows, tokens}: as many accumulators as registers allow beside
// the decoded codes.
template <class Dot, TernaryFormat F>
void MatMul(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  if (p.n_tokens == 1) return MatVec<Dot, F>(p, row_begin, row_end);
  constexpr int R = Dot::template kTile<F>.rows, T = Dot::template kTile<F>.tokens;
  constexpr int64_t kRowChunk = 16, kBlockRun = 8;
  __m256 acc[kRowChunk * T];
  const uint8_t* rows[kRowChunk];
  for (int64_t c0 = row_begin; c0 < row_end; c0 += kRowChunk) {
    const int64_t c1 = std::min(row_end, c0 + kRowChunk);
    for (int64_t i = c0; i < c1; ++i) rows[i - c0] = RowData(p, i);
    for (int64_t t0 = 0; t0 < p.n_tokens; t0 += T) {
      const int n = static_cast<int>(std::min<int64_t>(T, p.n_tokens - t0));
      for (int s = 0; s < p.n_segments; ++s) {
        std::fill(acc, acc + (c1 - c0) * T, _mm256_setzero_ps());
        for (int64_t b0 = p.segment_begin[s]; b0 < p.segment_end[s]; b0 += kBlockRun) {
          const int64_t b1 = std::min(p.segment_end[s], b0 + kBlockRun);
          int64_t i = c0;
          for (; i + R <= c1; i += R) {
            TokenRun<Dot, F, R, T>(p, rows + (i - c0), t0, n, b0, b1, acc + (i - c0) * T, T,
                                   t0 == 0);
          }
          for (; i < c1; ++i) {
            TokenRun<Dot, F, 1, T>(p, rows + (i - c0), t0, n, b0, b1, acc + (i - c0) * T, T,
                                   t0 == 0);
          }
        }
        for (int64_t i = c0; i < c1; ++i) {
          for (int t = 0; t < n; ++t) {
            p.y[s][(t0 + t) * p.y_stride + i] = JoinLanes<F>(acc[(i - c0) * T + t]);
          }
        }
      }
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
