// The AVX-512 VNNI ternary kernel, written once for the two files that include it:
// ternary_matmul_avx512.cc (AVX-512 F, BW, VL, VNNI) and ternary_matmul_avx512vbmi.cc (the same
// plus VBMI, whose one-instruction byte permute decodes PTQ1_0 in fewer steps). The VBMI decode
// is compiled where the including file's flags define __AVX512VBMI__; everything else is the same.
//
// vpdpbusd multiplies the unsigned codes by the int8 activations and adds four products to each
// int32 lane in one instruction, so the code vectors chain into one accumulator with no int16
// step. The tiling is the shared Tile (ternary_kernel_x86.h), and every float lane takes the AVX2
// kernel's operations in its order, so the bits are the same.
//
// Codes are decoded two vectors per 512-bit register, each 128-bit lane as the 256-bit decodes
// in ternary_kernel_x86.h do it, and meet the activations in 512-bit vpdpbusd: half the
// instructions for the same exact integer sums. The float steps then take two (row, token) pairs
// per register: one convert, one multiply and one FMA for both. Two ways of pairing:
// - PQ2_0 pairs rows (RowPairCodes, RowPairAccumulators): a register holds one code vector of
//   two rows and meets a token's vector loaded into both halves, so the sums land in place.
// - PTQ1_0 pairs tokens (WideCodes, PairedAccumulators; rows where there is one token): a
//   register holds two code vectors of one row, and two shuffles and an add join each pair's
//   halves. Its decode, the heavier part, stays amortized over more tokens that way.
// vpdpbusd and the float multiplies share the multiply pipes, which bound the batched kernel
// (bench/RESULTS.md, "2026-12-05 (later)" and "(third)").
//
// Internal linkage throughout, as in ternary_kernel_x86.h: each including file has its own ISA.
#ifndef WALSH_KERNELS_CPU_TERNARY_KERNEL_VNNI_H_
#define WALSH_KERNELS_CPU_TERNARY_KERNEL_VNNI_H_

#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/ternary_kernel_x86.h"

namespace walsh {
namespace {

// A block's codes: c[j] holds code vectors 2j and 2j + 1 (BlockCodes' c[2j] and c[2j + 1]).
struct WideCodes {
  __m512i c[2];
  __m256 dw;
};

// `low` in the low 256 bits, `high` in the high ones.
[[gnu::always_inline]] inline __m512i Join(__m256i low, __m256i high) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

[[gnu::always_inline]] inline __m512i Ptq1WideDigits(__m512i source, const int8_t* shuffle,
                                                     const int16_t* pow3) {
  const __m512i high = _mm512_shuffle_epi8(source, _mm512_load_si512(shuffle));
  return _mm512_mulhi_epu16(_mm512_mullo_epi16(high, _mm512_load_si512(pow3)),
                            _mm512_set1_epi16(3));
}

[[gnu::always_inline]] inline WideCodes DecodePtq1Wide(const block_ptq1_0& blk) {
  const __m256i bytes12to27 = Ptq1Bytes12To27(blk);
  WideCodes out;
  for (int j = 0; j < 2; ++j) {
    const __m512i source =
        Join(Ptq1Source(blk, bytes12to27, 2 * j), Ptq1Source(blk, bytes12to27, 2 * j + 1));
    out.c[j] = _mm512_packus_epi16(
        Ptq1WideDigits(source, kPtq1Gather.shuffle[0][2 * j], kPtq1Gather.pow3[0][2 * j]),
        Ptq1WideDigits(source, kPtq1Gather.shuffle[1][2 * j], kPtq1Gather.pow3[1][2 * j]));
  }
  out.dw = _mm256_set1_ps(_cvtsh_ss(blk.d));
  return out;
}

#ifdef __AVX512VBMI__
// With VBMI, one byte permute (vpermb) per 32 words takes each code's source byte straight from
// the block, loaded once, into the high byte of its word: it replaces DecodePtq1Wide's broadcasts,
// blends, inserts and in-lane shuffles (about 25 instructions a block become about 15); the
// multiplies and packs are the same, so are the codes.
//
// The block byte behind each byte of DecodePtq1Wide's word vectors ([A or B][j] for c[j]), read
// off its gather: shuffle index s of vector v's half is block byte 4v + s below 4, else
// 16 + (s - 4); the words' low bytes (s < 0) are left 0 and zeroed by the permute's mask.
struct Ptq1Permute {
  alignas(64) int8_t index[2][2][64];
};
constexpr Ptq1Permute MakePtq1Permute() {
  Ptq1Permute g{};
  for (int x = 0; x < 2; ++x) {
    for (int j = 0; j < 2; ++j) {
      for (int k = 0; k < 64; ++k) {
        const int v = 2 * j + k / 32, s = kPtq1Gather.shuffle[x][v][k % 32];
        g.index[x][j][k] = static_cast<int8_t>(s < 0 ? 0 : s < 4 ? 4 * v + s : 16 + (s - 4));
      }
    }
  }
  return g;
}
inline constexpr Ptq1Permute kPtq1Permute = MakePtq1Permute();

[[gnu::always_inline]] inline __m512i Ptq1PermDigits(__m512i block, const int8_t* index,
                                                     const int16_t* pow3) {
  const __m512i high =
      _mm512_maskz_permutexvar_epi8(0xaaaaaaaaaaaaaaaaull, _mm512_load_si512(index), block);
  return _mm512_mulhi_epu16(_mm512_mullo_epi16(high, _mm512_load_si512(pow3)),
                            _mm512_set1_epi16(3));
}

[[gnu::always_inline]] inline WideCodes DecodePtq1Vbmi(const block_ptq1_0& blk) {
  // The block's 28 bytes alone: a masked load never touches the bytes after a matrix's last block.
  constexpr __mmask32 kBlockBytes = (uint64_t{1} << sizeof(block_ptq1_0)) - 1;
  const __m512i block = _mm512_zextsi256_si512(_mm256_maskz_loadu_epi8(kBlockBytes, &blk));
  WideCodes out;
  for (int j = 0; j < 2; ++j) {
    out.c[j] = _mm512_packus_epi16(
        Ptq1PermDigits(block, kPtq1Permute.index[0][j], kPtq1Gather.pow3[0][2 * j]),
        Ptq1PermDigits(block, kPtq1Permute.index[1][j], kPtq1Gather.pow3[1][2 * j]));
  }
  out.dw = _mm256_set1_ps(_cvtsh_ss(blk.d));
  return out;
}
#endif

// `low` in the low 256 bits, `high` in the high ones (AVX-512F only: no DQ here).
[[gnu::always_inline]] inline __m512 Join(__m256 low, __m256 high) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(low)), _mm256_castps_pd(high), 1));
}

[[gnu::always_inline]] inline __m256 HighHalf(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

// 32 bytes at p (32-byte aligned) in both halves.
[[gnu::always_inline]] inline __m512i BothHalves(const void* p) {
  return _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}

[[gnu::always_inline]] inline __m512 BothHalves(const float* p) {
  return _mm512_castpd_ps(
      _mm512_broadcast_f64x4(_mm256_load_pd(reinterpret_cast<const double*>(p))));
}

// PQ2_0 decodes rows in pairs: a 512-bit register holds one block's code vector for two rows,
// row 2i's in the low 256 bits and row 2i + 1's in the high ones. c[p] is both rows' plane p
// (DecodePq2's c[p]: the code bytes shifted right by 2p), dw both rows' scales. Int32 lane L of
// each half holds group L, so four vpdpbusd against a token's activations (each 32-byte vector in
// both halves) leave both rows' eight group sums in place, with no step between the halves.
struct RowPairCodes {
  __m512i c[4];
  __m512 dw;
};

[[gnu::always_inline]] inline RowPairCodes DecodePq2Pair(const block_pq2_0& b0,
                                                         const block_pq2_0& b1) {
  const __m512i qs = Join(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0.qs)),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1.qs)));
  const __m512i m3 = _mm512_set1_epi8(3);
  RowPairCodes out;
  out.c[0] = _mm512_and_si512(qs, m3);
  out.c[1] = _mm512_and_si512(_mm512_srli_epi16(qs, 2), m3);
  out.c[2] = _mm512_and_si512(_mm512_srli_epi16(qs, 4), m3);
  out.c[3] = _mm512_and_si512(_mm512_srli_epi16(qs, 6), m3);
  out.dw = Join(_mm256_set1_ps(_cvtsh_ss(b0.d)), _mm256_set1_ps(_cvtsh_ss(b1.d)));
  return out;
}

// R rows by T tokens of accumulators, rows in pairs: pair i, token t holds rows 2i and 2i + 1's
// eight group lanes in the low and high halves of one 512-bit register (acc[r · stride + t] in
// memory, as TokenAccumulators keep them). An odd last row pairs with itself: the same lanes
// twice, the high half dropped (the one-token kernel's last rows, a chunk's odd row).
template <class Dot, int R, int T>
struct RowPairAccumulators {
  static constexpr int kPairs = (R + 1) / 2;
  __m512 a[kPairs][T];

  static constexpr int HighRow(int i) { return 2 * i + 1 < R ? 2 * i + 1 : 2 * i; }

  [[gnu::always_inline]] void Load(const __m256* acc, int stride) {
    for (int i = 0; i < kPairs; ++i) {
      for (int t = 0; t < T; ++t)
        a[i][t] = Join(acc[2 * i * stride + t], acc[HighRow(i) * stride + t]);
    }
  }
  [[gnu::always_inline]] void Store(__m256* acc, int stride) const {
    for (int i = 0; i < kPairs; ++i) {
      for (int t = 0; t < T; ++t) {
        acc[2 * i * stride + t] = _mm512_castps512_ps256(a[i][t]);
        if (HighRow(i) != 2 * i) acc[HighRow(i) * stride + t] = HighHalf(a[i][t]);
      }
    }
  }
  // Block b of each row meets the same block of every token, x[t · x_stride]: every pair's codes
  // are decoded first, so each token's activations are loaded once for all rows. Lane by lane:
  // acc = fma(float(−Σq + Σ code · q), dw · dx, acc), as Accumulate (ternary_kernel_x86.h).
  template <TernaryFormat F>
  [[gnu::always_inline]] void AddBlock(const uint8_t* const* rows, int64_t b, const Q8Block128* x,
                                       int64_t x_stride) {
    RowPairCodes w[kPairs];
    for (int i = 0; i < kPairs; ++i)
      w[i] = Dot::template DecodePair<F>(rows[2 * i], rows[HighRow(i)], b);
    for (int t = 0; t < T; ++t) {
      const Q8Block128& xb = x[t * x_stride];
      const __m512i start = BothHalves(xb.minus_sum);
      const __m512 dx = BothHalves(xb.d);
      __m512i q[4];
      for (int v = 0; v < 4; ++v) q[v] = BothHalves(xb.qs + 32 * v);
      for (int i = 0; i < kPairs; ++i) {
        __m512i isum = start;
        for (int v = 0; v < 4; ++v) isum = _mm512_dpbusd_epi32(isum, w[i].c[v], q[v]);
        a[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(w[i].dw, dx), a[i][t]);
      }
    }
  }
};

// Two (row, token) pairs' eight group lanes in one 512-bit register. Several tokens pair up:
// tokens 2k and 2k + 1 of a row, low and high half, as acc[] holds them in memory, and an odd last
// token alone in a 256-bit register. A tile of one token and an even number of rows (the one-token
// kernel's four rows, a multi-token product's last token run of one) pairs rows instead: rows 2i
// and 2i + 1.
template <class Dot, int R, int T>
struct PairedAccumulators {
  static constexpr bool kRowPairs = T == 1 && R % 2 == 0;
  static constexpr int kPairs = kRowPairs ? 0 : T / 2;
  static constexpr bool kLast = !kRowPairs && T % 2 == 1;
  __m512 pair[R][kPairs > 0 ? kPairs : 1];
  __m512 row_pair[R / 2 > 0 ? R / 2 : 1];
  __m256 last[R];  // token T − 1 where T is odd

  [[gnu::always_inline]] void Load(const __m256* acc, int stride) {
    for (int r = 0; r < R; ++r) {
      const float* row = reinterpret_cast<const float*>(acc + r * stride);
      for (int k = 0; k < kPairs; ++k) pair[r][k] = _mm512_loadu_ps(row + 16 * k);
      if constexpr (kLast) last[r] = acc[r * stride + T - 1];
    }
    if constexpr (kRowPairs) {
      for (int i = 0; i < R / 2; ++i)
        row_pair[i] = Join(acc[2 * i * stride], acc[(2 * i + 1) * stride]);
    }
  }
  [[gnu::always_inline]] void Store(__m256* acc, int stride) const {
    for (int r = 0; r < R; ++r) {
      float* row = reinterpret_cast<float*>(acc + r * stride);
      for (int k = 0; k < kPairs; ++k) _mm512_storeu_ps(row + 16 * k, pair[r][k]);
      if constexpr (kLast) acc[r * stride + T - 1] = last[r];
    }
    if constexpr (kRowPairs) {
      for (int i = 0; i < R / 2; ++i) {
        acc[2 * i * stride] = _mm512_castps512_ps256(row_pair[i]);
        acc[(2 * i + 1) * stride] = HighHalf(row_pair[i]);
      }
    }
  }
  // Block b of each row meets the same block of every token, x[t · x_stride]: every row's codes
  // are decoded first, so each token's activations are loaded once for all rows.
  template <TernaryFormat F>
  [[gnu::always_inline]] void AddBlock(const uint8_t* const* rows, int64_t b, const Q8Block128* x,
                                       int64_t x_stride) {
    WideCodes w[R];
    for (int r = 0; r < R; ++r) w[r] = Dot::template Decode<F>(rows[r], b);
    for (int k = 0; k < kPairs; ++k) {
      for (int r = 0; r < R; ++r) {
        pair[r][k] = Dot::AccumulatePair(pair[r][k], w[r], x[2 * k * x_stride], w[r],
                                         x[(2 * k + 1) * x_stride]);
      }
    }
    if constexpr (kRowPairs) {
      for (int i = 0; i < R / 2; ++i) {
        row_pair[i] = Dot::AccumulatePair(row_pair[i], w[2 * i], x[0], w[2 * i + 1], x[0]);
      }
    }
    if constexpr (kLast) {
      for (int r = 0; r < R; ++r) last[r] = Accumulate<Dot>(last[r], w[r], x[(T - 1) * x_stride]);
    }
  }
};

struct VnniDot {
  // PQ2_0 pairs rows; PTQ1_0, whose decode is the heavier part, pairs tokens, which keeps its
  // decode at two code vectors per register and amortizes it over more tokens (bench/RESULTS.md,
  // "2026-12-05 (third)").
  template <TernaryFormat F, int R, int T>
  using Accumulators =
      std::conditional_t<F == TernaryFormat::kPq2_0, RowPairAccumulators<VnniDot, R, T>,
                         PairedAccumulators<VnniDot, R, T>>;

  // Row and token tiles (ternary_kernel_x86.h), measured again with 512-bit codes
  // (bench/RESULTS.md, "2026-12-05 (later)" and "(third)"): PQ2_0 {4, 6} with row pairs, {2, 8},
  // {2, 16}, {4, 4} and {2, 4} slower; PTQ1_0 {2, 8} with token pairs; PTQ1_0 {2, 16}, {1, 32}
  // were slower, and {1, 16}, best before, is 3-7% slower with VBMI's decode and no faster without.
  template <TernaryFormat F>
  static constexpr TileShape kTile = F == TernaryFormat::kPq2_0 ? TileShape{4, 6} : TileShape{2, 8};

  // PTQ1_0's codes, two vectors per register (WideCodes).
  template <TernaryFormat F>
  [[gnu::always_inline]] static WideCodes Decode(const uint8_t* row, int64_t b) {
    static_assert(F == TernaryFormat::kPtq1_0, "PQ2_0 decodes rows in pairs (DecodePair)");
#ifdef __AVX512VBMI__
    return DecodePtq1Vbmi(reinterpret_cast<const block_ptq1_0*>(row)[b]);
#else
    return DecodePtq1Wide(reinterpret_cast<const block_ptq1_0*>(row)[b]);
#endif
  }

  // PQ2_0's codes of two rows (RowPairCodes).
  template <TernaryFormat F>
  [[gnu::always_inline]] static RowPairCodes DecodePair(const uint8_t* row0, const uint8_t* row1,
                                                        int64_t b) {
    static_assert(F == TernaryFormat::kPq2_0, "PTQ1_0 decodes one row at a time (Decode)");
    return DecodePq2Pair(reinterpret_cast<const block_pq2_0*>(row0)[b],
                         reinterpret_cast<const block_pq2_0*>(row1)[b]);
  }

  // start + Σ code · q per group, before the halves join: the low 256 bits gather code vectors 0
  // and 2, the high ones 1 and 3 (integer sums, so their order changes nothing).
  [[gnu::always_inline]] static __m512i HalfSums(__m512i start, const WideCodes& w,
                                                 const int8_t* qs) {
    const __m512i v = _mm512_dpbusd_epi32(start, w.c[0], _mm512_load_si512(qs));
    return _mm512_dpbusd_epi32(v, w.c[1], _mm512_load_si512(qs + 64));
  }

  // start + Σ code · q per group, in the format's lane order.
  static __m256i Sums(__m256i start, const WideCodes& w, const int8_t* qs) {
    const __m512i v = HalfSums(_mm512_zextsi256_si512(start), w, qs);
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  }

  // Accumulate (ternary_kernel_x86.h) for two (row, token) pairs at once, codes w0 with token
  // block x0 in the low half and w1 with x1 in the high one: lane by lane the same steps.
  [[gnu::always_inline]] static __m512 AccumulatePair(__m512 acc, const WideCodes& w0,
                                                      const Q8Block128& x0, const WideCodes& w1,
                                                      const Q8Block128& x1) {
    const auto start = [](const Q8Block128& xb) {
      return _mm512_zextsi256_si512(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(xb.minus_sum)));
    };
    const __m512i v0 = HalfSums(start(x0), w0, x0.qs), v1 = HalfSums(start(x1), w1, x1.qs);
    const __m512i isum = _mm512_add_epi32(_mm512_shuffle_i64x2(v0, v1, 0x44),   // low halves
                                          _mm512_shuffle_i64x2(v0, v1, 0xee));  // high halves
    const __m512 dx = Join(_mm256_load_ps(x0.d), _mm256_load_ps(x1.d));
    const __m512 scale = _mm512_mul_ps(Join(w0.dw, w1.dw), dx);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc);
  }
};

}  // namespace
}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_TERNARY_KERNEL_VNNI_H_
