// Ternary matrix × int8 activations straight on packed PQ2_0 / PTQ1_0 rows (docs/format.md §2,
// §3), as a TernaryProduct (kernels/ternary_product.h), in the combine order of
// kernels/ternary_block_combine.h. Eight lanes carry one (row, token) pair: lane g owns group g
// (elements 16g .. 16g+15) of every block, walks the window's blocks in order with its own FMA
// chain, and the eight lanes join by shuffles in the fixed pairwise tree. A warp holds four
// such pairs: four tokens of one row from four tokens on, two rows of two tokens, or four rows
// of one token (decode), so no lane idles at batch 1 and a pair's lanes read each block's 32
// code bytes together.
#include "kernels/block_types.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/ternary_block_combine.h"
#include "kernels/ternary_block_decode.h"

namespace walsh::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kPairsPerWarp = 32 / kQ8Groups;  // (row, token) pairs

// Σ code · q over group g of a PQ2_0 block against kPq2Planes activations: the group's codes
// are the 4 bytes qs[4g .. 4g+3], and plane p of them meets int32 word 8p + g of the
// activations (elements 4m + p for m = 4g .. 4g+3).
__device__ __forceinline__ int32_t Pq2GroupSum(const block_pq2_0& blk, const Q8Block128& xb,
                                               int g) {
  const uint32_t word = static_cast<uint32_t>(blk.qs[4 * g]) |
                        static_cast<uint32_t>(blk.qs[4 * g + 1]) << 8 |
                        static_cast<uint32_t>(blk.qs[4 * g + 2]) << 16 |
                        static_cast<uint32_t>(blk.qs[4 * g + 3]) << 24;
  const int* xq = reinterpret_cast<const int*>(xb.qs);
  int32_t sum = 0;
  for (int p = 0; p < 4; ++p) {
    sum = __dp4a(static_cast<int>((word >> (2 * p)) & 0x03030303u), xq[8 * p + g], sum);
  }
  return sum;
}

// The same for PTQ1_0 against kPtq1Lanes activations: elements 16g + 4v .. 16g + 4v + 3 of the
// group meet int32 word 8v + lane, where lane is the group's lane (Q8GroupLane).
__device__ __forceinline__ int32_t Ptq1GroupSum(const block_ptq1_0& blk, const Q8Block128& xb,
                                                int g, int lane) {
  const int* xq = reinterpret_cast<const int*>(xb.qs);
  int32_t sum = 0;
  for (int v = 0; v < 4; ++v) {
    int codes = 0;
    for (int k = 0; k < 4; ++k) codes |= Ptq1Trit(blk, 16 * g + 4 * v + k) << (8 * k);
    sum = __dp4a(codes, xq[8 * v + lane], sum);
  }
  return sum;
}

// kTokens tokens (1, 2 or 4) of each of kPairsPerWarp / kTokens rows per warp.
template <TernaryFormat F, int kTokens>
__global__ void MatMulKernel(TernaryProduct p, int64_t rows, int64_t row_bytes) {
  constexpr int kRowsPerWarp = kPairsPerWarp / kTokens;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane % kQ8Groups, pair = lane / kQ8Groups;
  int64_t i =
      (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp) * kRowsPerWarp + pair / kTokens;
  const int64_t t = static_cast<int64_t>(blockIdx.y) * kTokens + pair % kTokens;
  // Lanes past the last row or token stay for the shuffles (the group's eight lanes share a row
  // and a token, so a pair is active or idle as a whole) and write nothing.
  const bool active = i < rows && t < p.n_tokens;
  if (!active) i = 0;
  constexpr Q8Layout layout =
      F == TernaryFormat::kPq2_0 ? Q8Layout::kPq2Planes : Q8Layout::kPtq1Lanes;
  const int xlane = Q8GroupLane(layout, g);
  const int64_t r = p.row_index != nullptr ? p.row_index[i] : p.row_first + i;
  const uint8_t* wrow = p.w.data + r * row_bytes;
  for (int s = 0; s < p.n_segments; ++s) {
    float acc = 0.0f;
    if (active) {
      for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) {
        const Q8Block128& xb = p.x[t * p.x_stride + (b - p.x_first_block)];
        int32_t isum;
        float dw;
        if constexpr (F == TernaryFormat::kPq2_0) {
          const block_pq2_0& blk = reinterpret_cast<const block_pq2_0*>(wrow)[b];
          isum = Pq2GroupSum(blk, xb, g);
          dw = Fp16ToFloat(blk.d);
        } else {
          const block_ptq1_0& blk = reinterpret_cast<const block_ptq1_0*>(wrow)[b];
          isum = Ptq1GroupSum(blk, xb, g, xlane);
          dw = Fp16ToFloat(blk.d);
        }
        acc = AccumulateGroup(acc, isum + xb.minus_sum[xlane], dw, xb.d[xlane]);
      }
    }
    // ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) within each group of eight lanes.
    for (int step = 1; step < kQ8Groups; step *= 2) {
      acc += __shfl_down_sync(0xffffffffu, acc, step, kQ8Groups);
    }
    if (active && g == 0) p.y[s][t * p.y_stride + i] = acc;
  }
}

template <int kTokens>
int Launch(const TernaryProduct& p, int64_t rows, int64_t row_bytes, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarpsPerBlock * kPairsPerWarp / kTokens;
  const dim3 grid(GridFor(rows, kRowsPerBlock), GridFor(p.n_tokens, kTokens));
  switch (p.w.format) {
    case TernaryFormat::kPq2_0:
      MatMulKernel<TernaryFormat::kPq2_0, kTokens>
          <<<grid, 32 * kWarpsPerBlock, 0, stream>>>(p, rows, row_bytes);
      break;
    case TernaryFormat::kPtq1_0:
      MatMulKernel<TernaryFormat::kPtq1_0, kTokens>
          <<<grid, 32 * kWarpsPerBlock, 0, stream>>>(p, rows, row_bytes);
      break;
  }
  return LastLaunchError();
}

}  // namespace

int TernaryMatMulQ8(const TernaryProduct& p, int64_t rows, cudaStream_t stream) {
  if (p.w.cols % 128 != 0 || p.n_segments < 1 || p.n_segments > kMaxProductSegments) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (p.w.layout == TernaryLayout::kLanes) {
    return p.n_tokens >= kMmaMinTokens ? TernaryMatMulQ8Mma(p, rows, stream)
                                       : TernaryMatMulQ8Lanes(p, rows, {}, stream);
  }
  if (rows == 0 || p.n_tokens == 0) return 0;
  const int64_t row_bytes = p.w.row_bytes();  // the format table's geometry, on the host
  if (p.n_tokens >= 4) return Launch<4>(p, rows, row_bytes, stream);
  if (p.n_tokens >= 2) return Launch<2>(p, rows, row_bytes, stream);
  return Launch<1>(p, rows, row_bytes, stream);
}

}  // namespace walsh::cuda
