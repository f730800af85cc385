// Ternary matrix × int8 activations on lanes-layout rows (kernels/ternary_lanes_layout.h), the
// products of decode and small batches, in the combine order of kernels/ternary_block_combine.h
// (docs/cuda.md "The mat-vec"). As the file-layout kernel (ternary_matmul.cu), eight lanes carry
// one (row, token) pair and lane g owns group g of every block, four pairs to a warp; unlike it,
// a lane reads its group of four blocks at once as one 16-byte run (PTQ1_0: the block's digit
// bytes, 16 or 8 at a time), and issues the loads of `quads` such runs before it sums any, so
// each row keeps 4 · quads blocks in flight. Each lane's float chain still walks the window's
// blocks in order, so the bits are those of every other path.
#include "kernels/block_types.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/read_only_loads.h"
#include "kernels/ternary_block_combine.h"
#include "kernels/ternary_lane_sums.h"
#include "kernels/ternary_lanes_layout.h"

namespace walsh::cuda {
namespace {

constexpr int kPairsPerWarp = 32 / kQ8Groups;  // (row, token) pairs
constexpr int kMaxThreads = 256;

// What one lane loads of one quad (blocks 4q .. 4q+3) of its row.
template <TernaryFormat F>
struct QuadWords;
template <>
struct QuadWords<TernaryFormat::kPq2_0> {
  uint4 codes;  // group g's code word of each block
  uint2 scales;
};
template <>
struct QuadWords<TernaryFormat::kPtq1_0> {
  uint4 lo[4];  // qs[0..15] of each block (lanes 0..4)
  uint2 hi[4];  // qs[16..23] of each block (lanes 5..7)
  uint2 qh;     // the qh pairs (lane 7)
  uint2 scales;
};

template <TernaryFormat F>
__device__ __forceinline__ void LoadQuad(const uint8_t* row, int64_t bpr, int64_t q, int g,
                                         QuadWords<F>& w) {
  if constexpr (F == TernaryFormat::kPq2_0) {
    w.codes = Load16(row + q * 128 + 16 * g);
    w.scales = Load8(row + LanesPq2Scales(bpr) + 8 * q);
  } else {
    if (g < 5) {
#pragma unroll
      for (int j = 0; j < 4; ++j) w.lo[j] = Load16(row + 16 * (4 * q + j));
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) w.hi[j] = Load8(row + LanesPtq1Hi(bpr) + 8 * (4 * q + j));
      w.qh = Load8(row + LanesPtq1Qh(bpr) + 8 * q);
    }
    w.scales = Load8(row + LanesPtq1Scales(bpr) + 8 * q);
  }
}

// Group g's exact Σ code · q of block j of the quad against activation block xb. PTQ1_0 decodes
// by digit planes, or with kTable through the byte → trit table in shared memory.
template <TernaryFormat F, bool kTable>
__device__ __forceinline__ int32_t GroupSum(const QuadWords<F>& w, int j, const Q8Block128& xb,
                                            int g, int xlane, const Ptq1LanePlan& plan,
                                            const uint8_t* table) {
  const int32_t* xq = reinterpret_cast<const int32_t*>(xb.qs);
  if constexpr (F == TernaryFormat::kPq2_0) {
    return Pq2LaneSum(Word(w.codes, j), xq, g);
  } else {
    const uint32_t lo[4] = {w.lo[j].x, w.lo[j].y, w.lo[j].z, w.lo[j].w};
    const uint32_t qh = Half(w.qh, j);
    uint32_t codes[4];
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      codes[v] = kTable ? Ptq1CodeWordFromTable(table, plan, v, lo[v], w.hi[j].x, w.hi[j].y, qh)
                        : Ptq1CodeWord(plan, v, lo[v], w.hi[j].x, w.hi[j].y, qh);
    }
    return Ptq1LaneSum(codes, xq, xlane);
  }
}

// kTokens tokens (1, 2 or 4) of each of kPairsPerWarp / kTokens rows per warp; kQuads quads of
// each lane's loads in flight; kTable: PTQ1_0 through the trit table.
template <TernaryFormat F, int kTokens, int kQuads, bool kTable>
__global__ void __launch_bounds__(kMaxThreads)
    LanesMatMulKernel(TernaryProduct p, int64_t rows, int64_t bpr, int64_t row_bytes) {
  __shared__ uint8_t table[kTable ? kPtq1TritTableBytes : 1];
  if constexpr (kTable) {
    FillPtq1TritTable(table, threadIdx.x, blockDim.x);
    __syncthreads();
  }
  constexpr int kRowsPerWarp = kPairsPerWarp / kTokens;
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane % kQ8Groups, pair = lane / kQ8Groups;
  int64_t i = (static_cast<int64_t>(blockIdx.x) * warps + warp) * kRowsPerWarp + pair / kTokens;
  const int64_t t = static_cast<int64_t>(blockIdx.y) * kTokens + pair % kTokens;
  const bool active = i < rows && t < p.n_tokens;  // idle pairs stay for the shuffles
  if (!active) i = 0;
  constexpr Q8Layout layout =
      F == TernaryFormat::kPq2_0 ? Q8Layout::kPq2Planes : Q8Layout::kPtq1Lanes;
  const int xlane = Q8GroupLane(layout, g);
  const Ptq1LanePlan plan = Ptq1PlanFor(g);
  const int64_t r = p.row_index != nullptr ? p.row_index[i] : p.row_first + i;
  const uint8_t* wrow = p.w.data + r * row_bytes;
  const Q8Block128* xt = p.x + t * p.x_stride;
  for (int s = 0; s < p.n_segments; ++s) {
    float acc = 0.0f;
    const int64_t begin = p.segment_begin[s], end = p.segment_end[s];
    if (active) {
      for (int64_t q0 = begin / 4; 4 * q0 < end; q0 += kQuads) {
        QuadWords<F> w[kQuads] = {};
#pragma unroll
        for (int k = 0; k < kQuads; ++k) {
          if (4 * (q0 + k) < end) LoadQuad<F>(wrow, bpr, q0 + k, g, w[k]);
        }
#pragma unroll
        for (int k = 0; k < kQuads; ++k) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int64_t b = 4 * (q0 + k) + j;
            if (b < begin || b >= end) continue;
            const Q8Block128& xb = xt[b - p.x_first_block];
            const int32_t isum = GroupSum<F, kTable>(w[k], j, xb, g, xlane, plan, table);
            acc = AccumulateGroup(acc, isum + xb.minus_sum[xlane],
                                  Fp16ToFloat(Half(w[k].scales, j)), xb.d[xlane]);
          }
        }
      }
    }
    // ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) within each group of eight lanes.
    for (int step = 1; step < kQ8Groups; step *= 2) {
      acc += __shfl_down_sync(0xffffffffu, acc, step, kQ8Groups);
    }
    if (active && g == 0) p.y[s][t * p.y_stride + i] = acc;
  }
}

// The kernel of (format, tokens per pair, quads) as a function pointer, or null for a variant
// not built.
using KernelFn = void (*)(TernaryProduct, int64_t, int64_t, int64_t);

template <TernaryFormat F, int kTokens, bool kTable>
KernelFn PickQuads(int quads) {
  switch (quads) {
    case 1:
      return LanesMatMulKernel<F, kTokens, 1, kTable>;
    case 2:
      return LanesMatMulKernel<F, kTokens, 2, kTable>;
    case 4:
      return LanesMatMulKernel<F, kTokens, 4, kTable>;
  }
  return nullptr;
}

template <TernaryFormat F, bool kTable>
KernelFn PickTokens(int tokens, int quads) {
  if (tokens >= 4) return PickQuads<F, 4, kTable>(quads);
  if (tokens >= 2) return PickQuads<F, 2, kTable>(quads);
  return PickQuads<F, 1, kTable>(quads);
}

// PQ2_0 has no table variant: its codes are bit fields.
KernelFn Pick(TernaryFormat format, int64_t tokens, MatVecVariant v) {
  const int n = tokens >= 4 ? 4 : static_cast<int>(tokens);
  if (format == TernaryFormat::kPq2_0) {
    return PickTokens<TernaryFormat::kPq2_0, false>(n, v.quads_in_flight);
  }
  return v.ptq1_table ? PickTokens<TernaryFormat::kPtq1_0, true>(n, v.quads_in_flight)
                      : PickTokens<TernaryFormat::kPtq1_0, false>(n, v.quads_in_flight);
}

int TokensPerPair(int64_t tokens) { return tokens >= 4 ? 4 : tokens >= 2 ? 2 : 1; }

bool ValidVariant(MatVecVariant v) {
  return (v.quads_in_flight == 1 || v.quads_in_flight == 2 || v.quads_in_flight == 4) &&
         v.warps_per_cta >= 1 && 32 * v.warps_per_cta <= kMaxThreads;
}

}  // namespace

int TernaryMatMulQ8Lanes(const TernaryProduct& p, int64_t rows, MatVecVariant v,
                         cudaStream_t stream) {
  // 16-byte runs need 16-byte aligned rows: a misaligned load would end the CUDA context.
  if (p.w.layout != TernaryLayout::kLanes || !LanesLayoutFits(p.w.cols) || p.n_segments < 1 ||
      p.n_segments > kMaxProductSegments || !ValidVariant(v) ||
      reinterpret_cast<uintptr_t>(p.w.data) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.x) % 16 != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (rows == 0 || p.n_tokens == 0) return 0;
  const int tokens = TokensPerPair(p.n_tokens);
  const KernelFn kernel = Pick(p.w.format, p.n_tokens, v);
  const int rows_per_cta = v.warps_per_cta * kPairsPerWarp / tokens;
  const dim3 grid(GridFor(rows, rows_per_cta), GridFor(p.n_tokens, tokens));
  kernel<<<grid, 32 * v.warps_per_cta, 0, stream>>>(p, rows, p.w.blocks_per_row(), p.w.row_bytes());
  return LastLaunchError();
}

int LanesKernelFootprint(TernaryFormat format, int64_t tokens, MatVecVariant v,
                         KernelFootprint* out) {
  if (!ValidVariant(v)) return static_cast<int>(cudaErrorInvalidValue);
  const KernelFn kernel = Pick(format, tokens, v);
  cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e != cudaSuccess) return static_cast<int>(e);
  int ctas = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, 32 * v.warps_per_cta, 0);
  if (e != cudaSuccess) return static_cast<int>(e);
  *out = {attr.numRegs, static_cast<int>(attr.localSizeBytes), ctas, 32 * v.warps_per_cta};
  return 0;
}

}  // namespace walsh::cuda
