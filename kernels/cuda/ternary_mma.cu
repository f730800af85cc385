// Ternary matrix × int8 activations on the tensor cores, for batches and prefill (5 tokens and
// up) over lanes-layout rows (docs/cuda.md "The tensor-core product"). Each warp holds a tile of
// 16 rows × 8 tokens (kernels/ternary_mma_tile.h) and walks the window's blocks in order; per
// block and group one mma.sync.m16n8k16.s8 gives the exact integer sum of every (row, token)
// of the tile, and each lane steps the float chains of its four (row, token) elements, one per
// group, in the canonical combine order. So the bits are the CPU's.
#include "kernels/block_types.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/read_only_loads.h"
#include "kernels/ternary_block_combine.h"
#include "kernels/ternary_lane_sums.h"
#include "kernels/ternary_lanes_layout.h"
#include "kernels/ternary_mma_tile.h"

namespace walsh::cuda {
namespace {

constexpr int kWarpsPerCta = 4;

// d = a · b + c for one m16n8k16 int8 tile (exact int32 sums).
__device__ __forceinline__ void MmaS8(int32_t d[4], uint32_t a0, uint32_t a1, uint32_t b,
                                      const int32_t c[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%7, %8, %9, %10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
}

// What a lane reads of one row's block b: PQ2_0, the eight groups' code words; PTQ1_0, its word
// of qs[0..15], the two words of qs[16..23] and the qh pair.
template <TernaryFormat F>
struct RowBlock;
template <>
struct RowBlock<TernaryFormat::kPq2_0> {
  uint32_t group[8];
};
template <>
struct RowBlock<TernaryFormat::kPtq1_0> {
  uint32_t lo, hi0, hi1, qh;
};

template <TernaryFormat F>
__device__ __forceinline__ RowBlock<F> LoadRowBlock(const uint8_t* row, int64_t bpr, int64_t b,
                                                    int t) {
  RowBlock<F> r;
  if constexpr (F == TernaryFormat::kPq2_0) {
    const uint8_t* quad = row + (b / 4) * 128 + 4 * (b % 4);
#pragma unroll
    for (int g = 0; g < 8; ++g) r.group[g] = Load4(quad + 16 * g);
  } else {
    r.lo = Load4(row + 16 * b + 4 * t);
    r.hi0 = Load4(row + LanesPtq1Hi(bpr) + 8 * b);
    r.hi1 = Load4(row + LanesPtq1Hi(bpr) + 8 * b + 4);
    const uint8_t* qh = row + LanesPtq1Qh(bpr) + 2 * b;
    r.qh = static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8;
  }
  return r;
}

// Lane t's A word of group g.
template <TernaryFormat F>
__device__ __forceinline__ uint32_t CodesOf(const RowBlock<F>& r, int g, int t) {
  if constexpr (F == TernaryFormat::kPq2_0) {
    return Pq2MmaCodes(r.group[g], t);
  } else {
    return Ptq1CodeWord(Ptq1PlanFor(g), t, r.lo, r.hi0, r.hi1, r.qh);
  }
}

template <TernaryFormat F>
__global__ void __launch_bounds__(32 * kWarpsPerCta)
    MmaMatMulKernel(TernaryProduct p, int64_t rows, int64_t bpr, int64_t row_bytes) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane & 3;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + warp) * kMmaTileRows;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.y) * kMmaTileTokens;
  if (row0 >= rows) return;  // the whole warp: mma.sync needs every lane or none
  constexpr Q8Layout layout =
      F == TernaryFormat::kPq2_0 ? Q8Layout::kPq2Planes : Q8Layout::kPtq1Lanes;
  // Rows and tokens past the end read row0 and tok0 (which exist) and write nothing.
  int64_t i_of[2], tok_of[2];
  bool row_ok[2], tok_ok[2];
  const uint8_t* wrow[2];
  for (int h = 0; h < 2; ++h) {
    const int64_t i = row0 + MmaAccRow(lane, 2 * h);
    row_ok[h] = i < rows;
    i_of[h] = row_ok[h] ? i : row0;
    const int64_t r = p.row_index != nullptr ? p.row_index[i_of[h]] : p.row_first + i_of[h];
    wrow[h] = p.w.data + r * row_bytes;
    const int64_t tok = tok0 + MmaAccToken(lane, h);
    tok_ok[h] = tok < p.n_tokens;
    tok_of[h] = tok_ok[h] ? tok : tok0;
  }
  const int64_t b_tok = tok0 + (lane >> 2) < p.n_tokens ? tok0 + (lane >> 2) : tok0;
  for (int s = 0; s < p.n_segments; ++s) {
    float acc[kQ8Groups][4] = {};
    for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) {
      const int64_t xb = b - p.x_first_block;
      const Q8Block128& xc0 = p.x[tok_of[0] * p.x_stride + xb];
      const Q8Block128& xc1 = p.x[tok_of[1] * p.x_stride + xb];
      // B: activation words 8t .. 8t + 7 of this lane's token column: one per group lane.
      const int8_t* bq = p.x[b_tok * p.x_stride + xb].qs + 32 * t;
      const uint4 b_lo = Load16(bq), b_hi = Load16(bq + 16);
      const uint4 ms0_lo = Load16(xc0.minus_sum), ms0_hi = Load16(xc0.minus_sum + 4);
      const uint4 ms1_lo = Load16(xc1.minus_sum), ms1_hi = Load16(xc1.minus_sum + 4);
      const RowBlock<F> r_lo = LoadRowBlock<F>(wrow[0], bpr, b, t);
      const RowBlock<F> r_hi = LoadRowBlock<F>(wrow[1], bpr, b, t);
      const float dw_lo = LanesScale(F, wrow[0], bpr, b), dw_hi = LanesScale(F, wrow[1], bpr, b);
#pragma unroll
      for (int g = 0; g < kQ8Groups; ++g) {
        const int xl = Q8GroupLane(layout, g);
        const uint32_t bw = xl < 4 ? Word(b_lo, xl) : Word(b_hi, xl - 4);
        const int32_t ms0 = static_cast<int32_t>(xl < 4 ? Word(ms0_lo, xl) : Word(ms0_hi, xl - 4));
        const int32_t ms1 = static_cast<int32_t>(xl < 4 ? Word(ms1_lo, xl) : Word(ms1_hi, xl - 4));
        const int32_t c[4] = {MmaSumStart(ms0), MmaSumStart(ms1), MmaSumStart(ms0),
                              MmaSumStart(ms1)};
        int32_t d[4];
        MmaS8(d, CodesOf<F>(r_lo, g, t), CodesOf<F>(r_hi, g, t), bw, c);
        const float dx0 = xc0.d[xl], dx1 = xc1.d[xl];
        acc[g][0] = fmaf(MmaSumToFloat(d[0]), dw_lo * dx0, acc[g][0]);
        acc[g][1] = fmaf(MmaSumToFloat(d[1]), dw_lo * dx1, acc[g][1]);
        acc[g][2] = fmaf(MmaSumToFloat(d[2]), dw_hi * dx0, acc[g][2]);
        acc[g][3] = fmaf(MmaSumToFloat(d[3]), dw_hi * dx1, acc[g][3]);
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (!row_ok[e >> 1] || !tok_ok[e & 1]) continue;
      const float groups[kQ8Groups] = {acc[0][e], acc[1][e], acc[2][e], acc[3][e],
                                       acc[4][e], acc[5][e], acc[6][e], acc[7][e]};
      p.y[s][tok_of[e & 1] * p.y_stride + i_of[e >> 1]] = JoinGroups(groups);
    }
  }
}

}  // namespace

int TernaryMatMulQ8Mma(const TernaryProduct& p, int64_t rows, cudaStream_t stream) {
  if (p.w.layout != TernaryLayout::kLanes || !LanesLayoutFits(p.w.cols) || p.n_segments < 1 ||
      p.n_segments > kMaxProductSegments || reinterpret_cast<uintptr_t>(p.w.data) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.x) % 16 != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (rows == 0 || p.n_tokens == 0) return 0;
  const dim3 grid(GridFor(rows, kWarpsPerCta * kMmaTileRows), GridFor(p.n_tokens, kMmaTileTokens));
  const int64_t bpr = p.w.blocks_per_row(), row_bytes = p.w.row_bytes();
  if (p.w.format == TernaryFormat::kPq2_0) {
    MmaMatMulKernel<TernaryFormat::kPq2_0>
        <<<grid, 32 * kWarpsPerCta, 0, stream>>>(p, rows, bpr, row_bytes);
  } else {
    MmaMatMulKernel<TernaryFormat::kPtq1_0>
        <<<grid, 32 * kWarpsPerCta, 0, stream>>>(p, rows, bpr, row_bytes);
  }
  return LastLaunchError();
}

int MmaKernelFootprint(TernaryFormat format, KernelFootprint* out) {
  const auto kernel = format == TernaryFormat::kPq2_0 ? MmaMatMulKernel<TernaryFormat::kPq2_0>
                                                      : MmaMatMulKernel<TernaryFormat::kPtq1_0>;
  cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e != cudaSuccess) return static_cast<int>(e);
  int ctas = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, 32 * kWarpsPerCta, 0);
  if (e != cudaSuccess) return static_cast<int>(e);
  *out = {attr.numRegs, static_cast<int>(attr.localSizeBytes), ctas, 32 * kWarpsPerCta};
  return 0;
}

}  // namespace walsh::cuda
