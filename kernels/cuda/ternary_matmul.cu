// Ternary matrix × int8 activations straight on packed PQ2_0 / PTQ1_0 rows (docs/format.md §2,
// §3), as a TernaryProduct (kernels/ternary_product.h). A warp owns a row and up to 8 tokens:
// lane l decodes blocks l, l + 32, ... of the window once and computes every token's block term
// dw_b · CombineSubBlocks(isum, d) (integer dot products with dp4a for PQ2_0's code planes,
// trits decoded in registers for PTQ1_0); the terms meet in shared memory and each token's
// segment sums run in block order, as on the CPU.
#include "kernels/block_types.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/ternary_block_combine.h"
#include "kernels/ternary_block_decode.h"

namespace walsh::cuda {
namespace {

constexpr int kRowsPerBlock = 4;   // warps per thread block, one row each
constexpr int kTokensPerPass = 8;  // tokens sharing one decode of the weights

// Σ_j code_j · q_j per 32-element sub-block for a PQ2_0 block against kPq2Planes activations:
// word i of plane p holds the codes of elements 4m + p (m = 4i..4i+3), sub-block i / 2.
__device__ __forceinline__ void Pq2Sums(const uint32_t qs[8], const Q8Block128& xb,
                                        int32_t isum[4]) {
  const int* xq = reinterpret_cast<const int*>(xb.qs);
  for (int s = 0; s < 4; ++s) isum[s] = 0;
  for (int p = 0; p < 4; ++p) {
    for (int i = 0; i < 8; ++i) {
      const int codes = static_cast<int>((qs[i] >> (2 * p)) & 0x03030303u);
      isum[i / 2] = __dp4a(codes, xq[p * 8 + i], isum[i / 2]);
    }
  }
  for (int s = 0; s < 4; ++s) isum[s] -= xb.sum[s];  // codes are value + 1
}

__device__ __forceinline__ void Ptq1Sums(const block_ptq1_0& blk, const Q8Block128& xb,
                                         int32_t isum[4]) {
  for (int s = 0; s < 4; ++s) isum[s] = 0;
  for (int m = 0; m < 24; ++m) {
    const uint8_t byte = blk.qs[m];
    for (int n = 0; n < 5; ++n) {
      const int e = m < 16 ? n * 16 + m : 80 + n * 8 + (m - 16);
      isum[e / 32] += DecodeTrit(byte, n) * xb.qs[e];
    }
  }
  for (int j = 0; j < 2; ++j) {
    for (int n = 0; n < 4; ++n) {
      const int e = 120 + n * 2 + j;
      isum[e / 32] += DecodeTrit(blk.qh[j], n) * xb.qs[e];
    }
  }
  for (int s = 0; s < 4; ++s) isum[s] -= xb.sum[s];  // trits are value + 1
}

template <TernaryFormat F>
__global__ void MatMulKernel(TernaryProduct p, int64_t rows, int64_t row_bytes, int64_t b_lo,
                             int64_t nbw) {
  extern __shared__ float terms[];  // [kRowsPerBlock][kTokensPerPass][nbw]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokensPerPass;
  const int64_t nt = p.n_tokens - t0 < kTokensPerPass ? p.n_tokens - t0 : kTokensPerPass;
  if (i >= rows) return;
  const int64_t r = p.row_index != nullptr ? p.row_index[i] : p.row_first + i;
  float* my = terms + static_cast<int64_t>(warp) * kTokensPerPass * nbw;
  const uint8_t* wrow = p.w.data + r * row_bytes;
  for (int64_t k = lane; k < nbw; k += 32) {
    const int64_t b = b_lo + k;
    if constexpr (F == TernaryFormat::kPq2_0) {
      const block_pq2_0& blk = reinterpret_cast<const block_pq2_0*>(wrow)[b];
      uint32_t qs[8];
      for (int q = 0; q < 8; ++q) {
        qs[q] = static_cast<uint32_t>(blk.qs[4 * q]) |
                static_cast<uint32_t>(blk.qs[4 * q + 1]) << 8 |
                static_cast<uint32_t>(blk.qs[4 * q + 2]) << 16 |
                static_cast<uint32_t>(blk.qs[4 * q + 3]) << 24;
      }
      const float dw = Fp16ToFloat(blk.d);
      for (int64_t t = 0; t < nt; ++t) {
        const Q8Block128& xb = p.x[(t0 + t) * p.x_stride + (b - p.x_first_block)];
        int32_t isum[4];
        Pq2Sums(qs, xb, isum);
        my[t * nbw + k] = dw * CombineSubBlocks(isum, xb.d);
      }
    } else {
      const block_ptq1_0& blk = reinterpret_cast<const block_ptq1_0*>(wrow)[b];
      const float dw = Fp16ToFloat(blk.d);
      for (int64_t t = 0; t < nt; ++t) {
        const Q8Block128& xb = p.x[(t0 + t) * p.x_stride + (b - p.x_first_block)];
        int32_t isum[4];
        Ptq1Sums(blk, xb, isum);
        my[t * nbw + k] = dw * CombineSubBlocks(isum, xb.d);
      }
    }
  }
  __syncwarp();
  if (lane < nt) {
    const float* tt = my + lane * nbw;
    for (int s = 0; s < p.n_segments; ++s) {
      float acc = 0.0f;
      for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) acc += tt[b - b_lo];
      p.y[s][(t0 + lane) * p.y_stride + i] = acc;
    }
  }
}

}  // namespace

int TernaryMatMulQ8(const TernaryProduct& p, int64_t rows, cudaStream_t stream) {
  if (p.w.cols % 128 != 0 || p.n_segments < 1 || p.n_segments > kMaxProductSegments) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  for (int s = 1; s < p.n_segments; ++s) {  // segments tile one window, in order
    if (p.segment_begin[s] != p.segment_end[s - 1]) return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t b_lo = p.segment_begin[0], nbw = p.segment_end[p.n_segments - 1] - b_lo;
  const size_t shared = sizeof(float) * kRowsPerBlock * kTokensPerPass * (nbw > 0 ? nbw : 1);
  if (shared > 48 * 1024) return static_cast<int>(cudaErrorInvalidValue);  // > 384 blocks
  if (rows == 0 || p.n_tokens == 0) return 0;
  const dim3 grid(GridFor(rows, kRowsPerBlock), GridFor(p.n_tokens, kTokensPerPass));
  const int64_t row_bytes = p.w.row_bytes();  // the format table's geometry, on the host
  switch (p.w.format) {
    case TernaryFormat::kPq2_0:
      MatMulKernel<TernaryFormat::kPq2_0>
          <<<grid, 32 * kRowsPerBlock, shared, stream>>>(p, rows, row_bytes, b_lo, nbw);
      break;
    case TernaryFormat::kPtq1_0:
      MatMulKernel<TernaryFormat::kPtq1_0>
          <<<grid, 32 * kRowsPerBlock, shared, stream>>>(p, rows, row_bytes, b_lo, nbw);
      break;
  }
  return LastLaunchError();
}

}  // namespace walsh::cuda
