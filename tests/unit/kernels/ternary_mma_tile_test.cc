// The tensor-core product's decomposition (kernels/ternary_mma_tile.h, kernels/cuda/ternary_mma.cu)
// on the CPU: every lane's fragments built with the functions the device runs, the int8 MMA
// carried out as PTX defines its m16n8k16 .s8 fragment layout, the accumulator's bias trick and
// the per-element float chains; the result must be the CPU product's bits, over row and token
// counts that leave partial tiles and windows that start and end inside quads.
#include "kernels/ternary_mma_tile.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/ternary_block_combine.h"
#include "kernels/ternary_lanes_layout.h"
#include "tests/unit/kernels/random_ternary_rows.h"

namespace walsh {
namespace {

// Lane t's A word of group g of block b of a lanes-layout row, read as the kernel reads it.
uint32_t LaneCodes(TernaryFormat format, const uint8_t* row, int64_t bpr, int64_t b, int g, int t) {
  if (format == TernaryFormat::kPq2_0) {
    return Pq2MmaCodes(WordAt(row + (b / 4) * 128 + 16 * g + 4 * (b % 4)), t);
  }
  const uint8_t* qh = row + LanesPtq1Qh(bpr) + 2 * b;
  return Ptq1CodeWord(
      Ptq1PlanFor(g), t, WordAt(row + 16 * b + 4 * t), WordAt(row + LanesPtq1Hi(bpr) + 8 * b),
      WordAt(row + LanesPtq1Hi(bpr) + 8 * b + 4), static_cast<uint32_t>(qh[0] | qh[1] << 8));
}

int8_t ByteOf(uint32_t w, int i) { return static_cast<int8_t>(w >> (8 * i)); }

// mma.m16n8k16 .s8: d = a · b + c over the warp's fragments, as PTX lays them out.
void Mma(const uint32_t a[32][2], const uint32_t b[32], const int32_t c[32][4], int32_t d[32][4]) {
  for (int row = 0; row < 16; ++row) {
    for (int col = 0; col < 8; ++col) {
      const int c_lane = 4 * (row % 8) + col / 2, c_elem = (row >= 8 ? 2 : 0) + col % 2;
      int32_t sum = c[c_lane][c_elem];
      for (int k = 0; k < 16; ++k) {
        const int a_lane = 4 * (row % 8) + k / 4, b_lane = 4 * col + k / 4;
        sum += ByteOf(a[a_lane][row >= 8], k % 4) * ByteOf(b[b_lane], k % 4);
      }
      d[c_lane][c_elem] = sum;
    }
  }
}

// The kernel's whole product, warp tile by warp tile.
void MmaProduct(const TernaryProduct& p, int64_t rows, const uint8_t* lanes) {
  const int64_t bpr = p.w.blocks_per_row(), row_bytes = p.w.row_bytes();
  const Q8Layout layout = Q8LayoutFor(p.w.format);
  for (int64_t row0 = 0; row0 < rows; row0 += kMmaTileRows) {
    for (int64_t tok0 = 0; tok0 < p.n_tokens; tok0 += kMmaTileTokens) {
      auto row_of = [&](int lane, int e) {
        const int64_t i = row0 + MmaAccRow(lane, e);
        return i < rows ? i : row0;
      };
      auto tok_of = [&](int64_t tok) { return tok < p.n_tokens ? tok : tok0; };
      for (int s = 0; s < p.n_segments; ++s) {
        float acc[32][kQ8Groups][4] = {};
        for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) {
          const int64_t xb = b - p.x_first_block;
          for (int g = 0; g < kQ8Groups; ++g) {
            const int xl = Q8GroupLane(layout, g);
            uint32_t a[32][2], bw[32];
            int32_t c[32][4], d[32][4];
            for (int lane = 0; lane < 32; ++lane) {
              const int t = lane & 3;
              for (int h = 0; h < 2; ++h) {
                const uint8_t* row = lanes + (p.row_first + row_of(lane, 2 * h)) * row_bytes;
                a[lane][h] = LaneCodes(p.w.format, row, bpr, b, g, t);
              }
              const Q8Block128& xbq = p.x[tok_of(tok0 + (lane >> 2)) * p.x_stride + xb];
              bw[lane] = WordAt(reinterpret_cast<const uint8_t*>(xbq.qs) + 4 * (8 * t + xl));
              for (int e = 0; e < 4; ++e) {
                const Q8Block128& xc = p.x[tok_of(tok0 + MmaAccToken(lane, e)) * p.x_stride + xb];
                c[lane][e] = MmaSumStart(xc.minus_sum[xl]);
              }
            }
            Mma(a, bw, c, d);
            for (int lane = 0; lane < 32; ++lane) {
              for (int e = 0; e < 4; ++e) {
                const uint8_t* row = lanes + (p.row_first + row_of(lane, e)) * row_bytes;
                const Q8Block128& xc = p.x[tok_of(tok0 + MmaAccToken(lane, e)) * p.x_stride + xb];
                acc[lane][g][e] =
                    fmaf(MmaSumToFloat(d[lane][e]), LanesScale(p.w.format, row, bpr, b) * xc.d[xl],
                         acc[lane][g][e]);
              }
            }
          }
        }
        for (int lane = 0; lane < 32; ++lane) {
          for (int e = 0; e < 4; ++e) {
            const int64_t i = row0 + MmaAccRow(lane, e), tok = tok0 + MmaAccToken(lane, e);
            if (i >= rows || tok >= p.n_tokens) continue;
            float groups[kQ8Groups];
            for (int g = 0; g < kQ8Groups; ++g) groups[g] = acc[lane][g][e];
            p.y[s][tok * p.y_stride + i] = JoinGroups(groups);
          }
        }
      }
    }
  }
}

TEST(MmaTile, TheBiasTurnsTheIntegerSumIntoItsFloat) {
  for (int32_t n = -(1 << 22) + 1; n < (1 << 22); n += 997) {
    ASSERT_EQ(MmaSumToFloat(MmaSumStart(n)), static_cast<float>(n)) << n;
  }
  EXPECT_EQ(MmaSumToFloat(MmaSumStart(-4064) + 4064), 0.0f);
}

TEST(MmaTile, TheKernelsDecompositionGivesTheCpuProductsBits) {
  std::mt19937 gen(4);
  for (TernaryFormat format : {TernaryFormat::kPq2_0, TernaryFormat::kPtq1_0}) {
    const int64_t rows = 37, cols = 2 * 1024, bpr = cols / 128;  // a partial tile of rows
    const std::vector<uint8_t> file = RandomTernaryRows(format, rows, cols, gen);
    std::vector<uint8_t> lanes(file.size());
    RepackToLanes(format, file.data(), rows, cols, lanes.data());
    for (int64_t tokens : {5, 8, 13}) {
      const std::vector<Q8Block128> q = RandomQ8Activations(format, tokens, bpr, gen);
      // Whole rows, then four windows of 3 and 5 blocks (row-parallel slices inside quads).
      for (int windows : {1, 4}) {
        TernaryProduct p;
        p.w = {format, file.data(), rows, cols};
        p.x = q.data();
        p.x_stride = bpr;
        p.n_tokens = tokens;
        p.n_segments = windows;
        p.y_stride = rows;
        std::vector<float> want(windows * tokens * rows), got(want.size());
        const int64_t bounds[] = {0, 3, 8, 11, 16};
        for (int s = 0; s < windows; ++s) {
          p.segment_begin[s] = windows == 1 ? 0 : bounds[s];
          p.segment_end[s] = windows == 1 ? bpr : bounds[s + 1];
          p.y[s] = &want[s * tokens * rows];
        }
        TernaryMatMulQ8(BestCpuIsa(), p, 0, rows);
        for (int s = 0; s < windows; ++s) p.y[s] = &got[s * tokens * rows];
        MmaProduct(p, rows, lanes.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
            << FormatTraits(format).name << ", " << tokens << " tokens, " << windows
            << " window(s)";
      }
    }
  }
}

// Local rows from row_first on over activations that start at block x_first_block.
TEST(MmaTile, TheDecompositionHoldsForARowRangeOverPartOfTheInput) {
  std::mt19937 gen(7);
  for (TernaryFormat format : {TernaryFormat::kPq2_0, TernaryFormat::kPtq1_0}) {
    const int64_t rows = 40, cols = 2 * 1024, bpr = cols / 128, first = 4, tokens = 9;
    const std::vector<uint8_t> file = RandomTernaryRows(format, rows, cols, gen);
    std::vector<uint8_t> lanes(file.size());
    RepackToLanes(format, file.data(), rows, cols, lanes.data());
    const int64_t x_blocks = bpr - first;
    const std::vector<Q8Block128> q = RandomQ8Activations(format, tokens, x_blocks, gen);
    TernaryProduct p;
    p.w = {format, file.data(), rows, cols};
    p.x = q.data();
    p.x_stride = x_blocks;
    p.x_first_block = first;
    p.n_tokens = tokens;
    p.row_first = 5;
    const int64_t local_rows = 21;
    p.n_segments = 2;
    p.segment_begin[0] = first;
    p.segment_end[0] = 9;
    p.segment_begin[1] = 9;
    p.segment_end[1] = bpr;
    std::vector<float> want(2 * tokens * local_rows), got(want.size());
    p.y[0] = &want[0];
    p.y[1] = &want[tokens * local_rows];
    p.y_stride = local_rows;
    TernaryMatMulQ8(BestCpuIsa(), p, 0, local_rows);
    p.y[0] = &got[0];
    p.y[1] = &got[tokens * local_rows];
    MmaProduct(p, local_rows, lanes.data());
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
        << FormatTraits(format).name;
  }
}

}  // namespace
}  // namespace walsh
