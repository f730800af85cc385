// The lanes layout (kernels/ternary_lanes_layout.h) and the lane sums the CUDA mat-vec computes
// on it (kernels/ternary_lane_sums.h), on the CPU: the layout is a permutation of each row's
// bytes, the fast repack is that permutation, every weight reads back the same, the digit-plane
// decode equals DecodeTrit for every byte and digit, and the kernel's whole decomposition (each
// lane's chain over its group of the window's blocks, loaded as 16-byte runs, then the 8-lane
// tree) gives the CPU product's bits.
#include "kernels/ternary_lanes_layout.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/ternary_block_combine.h"
#include "kernels/ternary_lane_sums.h"
#include "tests/unit/kernels/random_ternary_rows.h"

namespace walsh {
namespace {

constexpr TernaryFormat kFormats[] = {TernaryFormat::kPq2_0, TernaryFormat::kPtq1_0};

TEST(LanesLayout, FitsRowsOfWholeOctetsOnly) {
  EXPECT_TRUE(LanesLayoutFits(1024));
  EXPECT_TRUE(LanesLayoutFits(5120));
  EXPECT_TRUE(LanesLayoutFits(17408));
  EXPECT_FALSE(LanesLayoutFits(384));
  EXPECT_FALSE(LanesLayoutFits(1152));
  EXPECT_FALSE(LanesLayoutFits(0));
}

TEST(LanesLayout, IsAPermutationOfEachRowAndTheRepackIsIt) {
  std::mt19937 gen(1);
  for (TernaryFormat format : kFormats) {
    for (int64_t bpr : {8, 16, 40}) {
      const int64_t bb = FormatTraits(format).block_bytes, row_bytes = bpr * bb;
      std::vector<int> hits(row_bytes, 0);
      for (int64_t b = 0; b < bpr; ++b) {
        for (int i = 0; i < bb; ++i) {
          const int64_t at = LanesByteOffset(format, bpr, b, i);
          ASSERT_GE(at, 0);
          ASSERT_LT(at, row_bytes);
          ++hits[at];
        }
      }
      for (int h : hits) ASSERT_EQ(h, 1) << FormatTraits(format).name << " bpr " << bpr;

      const int64_t rows = 3, cols = bpr * 128;
      const std::vector<uint8_t> file = RandomTernaryRows(format, rows, cols, gen);
      std::vector<uint8_t> lanes(file.size(), 0);
      RepackToLanes(format, file.data(), rows, cols, lanes.data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < bpr; ++b) {
          for (int i = 0; i < bb; ++i) {
            ASSERT_EQ(lanes[r * row_bytes + LanesByteOffset(format, bpr, b, i)],
                      file[r * row_bytes + b * bb + i]);
          }
          for (int j = 0; j < 128; ++j) {
            ASSERT_EQ(DequantizeTernaryLanes(format, &lanes[r * row_bytes], bpr, b, j),
                      DequantizeTernary(format, &file[r * row_bytes], b, j));
          }
        }
      }
    }
  }
}

TEST(LanesLayout, DigitWordsEqualDecodeTritForEveryByteAndDigit) {
  const uint32_t pow3[5] = {1, 3, 9, 27, 81};
  for (int byte = 0; byte < 256; ++byte) {
    for (int shift = 0; shift < 4; ++shift) {
      // The byte at each position of the word, its neighbours all 0xff (the worst carries).
      const uint32_t w = (0xffffffffu & ~(0xffu << (8 * shift))) | static_cast<uint32_t>(byte)
                                                                       << (8 * shift);
      for (int lo = 0; lo < 5; ++lo) {
        for (int hi = 0; hi < 5; ++hi) {
          const uint32_t got = Ptq1DigitWord(w, pow3[lo], pow3[hi]);
          for (int k = 0; k < 4; ++k) {
            const int digit = k < 2 ? lo : hi;
            ASSERT_EQ((got >> (8 * k)) & 0xff,
                      static_cast<uint32_t>(DecodeTrit(static_cast<uint8_t>(w >> (8 * k)), digit)))
                << "byte " << byte << " at " << shift << " digits " << lo << "/" << hi;
          }
        }
      }
    }
  }
}

TEST(LanesLayout, TheTritTableDecodesAsTheDigitPlanes) {
  uint8_t table[kPtq1TritTableBytes];
  FillPtq1TritTable(table, 0, 1);
  std::mt19937 gen(5);
  for (int trial = 0; trial < 20000; ++trial) {
    const uint32_t w = static_cast<uint32_t>(gen());
    for (int g = 0; g < 8; ++g) {
      const Ptq1LanePlan plan = Ptq1PlanFor(g);
      for (int v = 0; v < 4; ++v) {
        const uint32_t hi0 = static_cast<uint32_t>(gen()), hi1 = static_cast<uint32_t>(gen());
        const uint32_t qh = static_cast<uint32_t>(gen());
        ASSERT_EQ(Ptq1CodeWordFromTable(table, plan, v, w, hi0, hi1, qh),
                  Ptq1CodeWord(plan, v, w, hi0, hi1, qh))
            << "group " << g << " word " << v;
      }
    }
  }
}

TEST(LanesLayout, Ptq1GroupCodesAreTheGroupsTrits) {
  std::mt19937 gen(2);
  for (int trial = 0; trial < 2000; ++trial) {
    uint8_t trits[128];
    for (uint8_t& t : trits) t = gen() % 3;
    block_ptq1_0 blk;
    PackBlockPtq1_0(trits, FloatToFp16(1.0f), &blk);
    const uint32_t lo[4] = {WordAt(blk.qs), WordAt(blk.qs + 4), WordAt(blk.qs + 8),
                            WordAt(blk.qs + 12)};
    const uint32_t hi[2] = {WordAt(blk.qs + 16), WordAt(blk.qs + 20)};
    const uint32_t qh = blk.qh[0] | blk.qh[1] << 8;
    for (int g = 0; g < 8; ++g) {
      uint32_t codes[4];
      Ptq1GroupCodes(Ptq1PlanFor(g), lo, hi, qh, codes);
      for (int e = 0; e < 16; ++e) {
        ASSERT_EQ((codes[e / 4] >> (8 * (e % 4))) & 0xff, trits[16 * g + e]) << "group " << g;
      }
    }
  }
}

// The CUDA kernel's decomposition run on the host: lane g of a (row, token) pair loads its
// group's words of each block from the lanes layout, sums with Dp4a, chains over the window's
// blocks in order, and the eight lanes join in JoinGroups' tree.
void LanesProduct(const TernaryProduct& p, int64_t rows, const uint8_t* lanes) {
  const int64_t bpr = p.w.blocks_per_row(), row_bytes = p.w.row_bytes();
  const Q8Layout layout = Q8LayoutFor(p.w.format);
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* row = lanes + (p.row_first + i) * row_bytes;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      for (int s = 0; s < p.n_segments; ++s) {
        float acc[kQ8Groups] = {};
        for (int g = 0; g < kQ8Groups; ++g) {
          const int xlane = Q8GroupLane(layout, g);
          for (int64_t b = p.segment_begin[s]; b < p.segment_end[s]; ++b) {
            const Q8Block128& xb = p.x[t * p.x_stride + (b - p.x_first_block)];
            const int32_t* xq = reinterpret_cast<const int32_t*>(xb.qs);
            int32_t isum;
            if (p.w.format == TernaryFormat::kPq2_0) {
              isum = Pq2LaneSum(WordAt(row + (b / 4) * 128 + 16 * g + 4 * (b % 4)), xq, g);
            } else {
              const uint8_t* l = row + 16 * b;
              const uint8_t* h = row + LanesPtq1Hi(bpr) + 8 * b;
              const uint8_t* q = row + LanesPtq1Qh(bpr) + 2 * b;
              const uint32_t lo[4] = {WordAt(l), WordAt(l + 4), WordAt(l + 8), WordAt(l + 12)};
              const uint32_t hi[2] = {WordAt(h), WordAt(h + 4)};
              uint32_t codes[4];
              Ptq1GroupCodes(Ptq1PlanFor(g), lo, hi, static_cast<uint32_t>(q[0] | q[1] << 8),
                             codes);
              isum = Ptq1LaneSum(codes, xq, xlane);
            }
            acc[g] = AccumulateGroup(acc[g], isum + xb.minus_sum[xlane],
                                     LanesScale(p.w.format, row, bpr, b), xb.d[xlane]);
          }
        }
        p.y[s][t * p.y_stride + i] = JoinGroups(acc);
      }
    }
  }
}

TEST(LanesLayout, TheKernelsDecompositionGivesTheCpuProductsBits) {
  std::mt19937 gen(3);
  for (TernaryFormat format : kFormats) {
    const int64_t rows = 24, cols = 5 * 1024, bpr = cols / 128;
    const std::vector<uint8_t> file = RandomTernaryRows(format, rows, cols, gen);
    std::vector<uint8_t> lanes(file.size());
    RepackToLanes(format, file.data(), rows, cols, lanes.data());
    for (int64_t tokens : {1, 3, 4}) {
      const std::vector<Q8Block128> q = RandomQ8Activations(format, tokens, bpr, gen);
      // Eight windows of 5 blocks, as a row-parallel product's canonical slices: windows that
      // start and end inside a quad.
      TernaryProduct p;
      p.w = {format, file.data(), rows, cols};
      p.x = q.data();
      p.x_stride = bpr;
      p.n_tokens = tokens;
      p.n_segments = 8;
      std::vector<float> want(8 * tokens * rows), got(8 * tokens * rows);
      for (int s = 0; s < 8; ++s) {
        p.segment_begin[s] = 5 * s;
        p.segment_end[s] = 5 * s + 5;
        p.y[s] = &want[s * tokens * rows];
      }
      p.y_stride = rows;
      TernaryMatMulQ8(BestCpuIsa(), p, 0, rows);
      for (int s = 0; s < 8; ++s) p.y[s] = &got[s * tokens * rows];
      LanesProduct(p, rows, lanes.data());
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << FormatTraits(format).name << ", " << tokens << " token(s)";
    }
  }
}

// Local rows from row_first on, and activations that start at block x_first_block: a
// column-parallel shard's rows over a row-parallel shard's part of the input.
TEST(LanesLayout, TheDecompositionHoldsForARowRangeOverPartOfTheInput) {
  std::mt19937 gen(6);
  for (TernaryFormat format : kFormats) {
    const int64_t rows = 24, cols = 5 * 1024, bpr = cols / 128, first = 8, tokens = 2;
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
    p.row_first = 7;
    const int64_t local_rows = 13;
    p.n_segments = 3;
    const int64_t bounds[] = {first, 13, 21, bpr};
    std::vector<float> want(3 * tokens * local_rows), got(want.size());
    for (int s = 0; s < 3; ++s) {
      p.segment_begin[s] = bounds[s];
      p.segment_end[s] = bounds[s + 1];
      p.y[s] = &want[s * tokens * local_rows];
    }
    p.y_stride = local_rows;
    TernaryMatMulQ8(BestCpuIsa(), p, 0, local_rows);
    for (int s = 0; s < 3; ++s) p.y[s] = &got[s * tokens * local_rows];
    LanesProduct(p, local_rows, lanes.data());
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
        << FormatTraits(format).name;
  }
}

}  // namespace
}  // namespace walsh
