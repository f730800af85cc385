// AVX-512 VNNI ternary kernel: vpdpbusd multiplies the unsigned codes by the int8 activations
// and adds four products to each int32 lane in one instruction, so the code vectors chain into
// one accumulator with no int16 step. The tiles and the float steps are the AVX2 kernel's
// (ternary_kernel_x86.h), so the bits are too.
//
// Codes are decoded two vectors per 512-bit register (WideCodes), each 128-bit lane as the
// 256-bit decodes in ternary_kernel_x86.h do it, and meet the activations in two 512-bit
// vpdpbusd: half the instructions for the same exact integer sums. The accumulators and float
// steps stay on 256-bit registers (AVX512VL).
#include <immintrin.h>

#include "kernels/cpu/ternary_kernel_x86.h"
#include "kernels/cpu/ternary_matmul.h"

namespace walsh {
namespace {

// A block's codes: c[j] holds code vectors 2j and 2j + 1 (BlockCodes' c[2j] and c[2j + 1]).
struct WideCodes {
  __m512i c[2];
  __m256 dw;
};

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
        _mm512_inserti64x4(_mm512_castsi256_si512(Ptq1Source(blk, bytes12to27, 2 * j)),
                           Ptq1Source(blk, bytes12to27, 2 * j + 1), 1);
    out.c[j] = _mm512_packus_epi16(
        Ptq1WideDigits(source, kPtq1Gather.shuffle[0][2 * j], kPtq1Gather.pow3[0][2 * j]),
        Ptq1WideDigits(source, kPtq1Gather.shuffle[1][2 * j], kPtq1Gather.pow3[1][2 * j]));
  }
  out.dw = _mm256_set1_ps(_cvtsh_ss(blk.d));
  return out;
}

// Every 16-bit word `low` in the low 256 bits and `high` in the high ones.
inline __m512i HalvesOf16(int16_t low, int16_t high) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(low)), _mm256_set1_epi16(high),
                            1);
}

// PQ2_0 codes the same way: plane p (DecodePq2's c[p]) is the code bytes shifted right by 2p;
// planes 0 and 1 in c[0], 2 and 3 in c[1].
[[gnu::always_inline]] inline WideCodes DecodePq2Wide(const block_pq2_0& blk) {
  const __m512i qs =
      _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs)));
  const __m512i m3 = _mm512_set1_epi8(3);
  WideCodes out;
  out.c[0] = _mm512_and_si512(_mm512_srlv_epi16(qs, HalvesOf16(0, 2)), m3);
  out.c[1] = _mm512_and_si512(_mm512_srlv_epi16(qs, HalvesOf16(4, 6)), m3);
  out.dw = _mm256_set1_ps(_cvtsh_ss(blk.d));
  return out;
}

struct VnniDot {
  // Row and token tiles (ternary_kernel_x86.h), measured best with 256-bit codes (bench/RESULTS.md,
  // 2026-12-01) and not measured again since the codes went to 512 bits.
  template <TernaryFormat F>
  static constexpr TileShape kTile =
      F == TernaryFormat::kPq2_0 ? TileShape{2, 8} : TileShape{1, 16};

  template <TernaryFormat F>
  [[gnu::always_inline]] static auto Decode(const uint8_t* row, int64_t b) {
    if constexpr (F == TernaryFormat::kPq2_0) {
      return DecodePq2Wide(reinterpret_cast<const block_pq2_0*>(row)[b]);
    } else {
      return DecodePtq1Wide(reinterpret_cast<const block_ptq1_0*>(row)[b]);
    }
  }

  // start + Σ code · q per group, in the format's lane order: the low 256 bits gather code
  // vectors 0 and 2, the high ones 1 and 3 (integer sums, so their order changes nothing).
  static __m256i Sums(__m256i start, const WideCodes& w, const int8_t* qs) {
    __m512i v = _mm512_dpbusd_epi32(_mm512_zextsi256_si512(start), w.c[0], _mm512_load_si512(qs));
    v = _mm512_dpbusd_epi32(v, w.c[1], _mm512_load_si512(qs + 64));
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  }
};

}  // namespace

void TernaryMatMulQ8Avx512Vnni(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  MatMulAnyFormat<VnniDot>(p, row_begin, row_end);
}

}  // namespace walsh
