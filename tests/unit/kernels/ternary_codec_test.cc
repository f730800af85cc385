// PQ2_0 / PTQ1_0 codecs against rows of the released 27B files (fixtures/prism/rows).
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "common/sha256.h"
#include "gtest/gtest.h"
#include "kernels/block_types.h"
#include "kernels/float_convert.h"
#include "kernels/ternary_codec_ref.h"
#include "tests/util/test_util.h"

namespace walsh {
namespace {

using testing::ReadFileOrDie;
using testing::TestDataPath;

struct RowCase {
  std::string file, pack, tensor;
  int64_t width;
  std::string sha256;
};

std::vector<RowCase> ReadIndex() {
  std::istringstream in(ReadFileOrDie(TestDataPath("prism/rows/index.tsv")));
  std::string line;
  std::getline(in, line);  // header
  std::vector<RowCase> rows;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    RowCase r;
    std::string row;
    f >> r.file >> r.pack >> r.tensor >> row >> r.width >> r.sha256;
    rows.push_back(r);
  }
  return rows;
}

std::vector<float> Decode(const RowCase& r, const std::string& bytes) {
  std::vector<float> out(r.width);
  if (r.pack == "pq2_0") {
    DequantizeRowPq2_0Ref(reinterpret_cast<const block_pq2_0*>(bytes.data()), out.data(), r.width);
  } else {
    DequantizeRowPtq1_0Ref(reinterpret_cast<const block_ptq1_0*>(bytes.data()), out.data(),
                           r.width);
  }
  return out;
}

std::string Encode(const RowCase& r, const std::vector<float>& x) {
  if (r.pack == "pq2_0") {
    std::vector<block_pq2_0> b(r.width / 128);
    QuantizeRowPq2_0Ref(x.data(), b.data(), r.width);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size() * sizeof b[0]);
  }
  std::vector<block_ptq1_0> b(r.width / 128);
  QuantizeRowPtq1_0Ref(x.data(), b.data(), r.width);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size() * sizeof b[0]);
}

TEST(TernaryCodec, ReleasedRowsDecodeToF16Digest) {
  const std::vector<RowCase> rows = ReadIndex();
  ASSERT_EQ(rows.size(), 4u);
  for (const RowCase& r : rows) {
    SCOPED_TRACE(r.file);
    const std::string bytes = ReadFileOrDie(TestDataPath("prism/rows/" + r.file));
    const size_t block_bytes = r.pack == "pq2_0" ? 34 : 28;
    ASSERT_EQ(bytes.size(), r.width / 128 * block_bytes);
    std::vector<float> x = Decode(r, bytes);
    for (float& v : x) {
      if (v == 0.0f) v = 0.0f;  // the digest is of the row with -0 turned into +0
    }
    EXPECT_EQ(Sha256Hex(x.data(), x.size() * 4), r.sha256);
    EXPECT_EQ(Encode(r, x), bytes) << "encode(decode(row)) must give back the same blocks";
  }
}

TEST(TernaryCodec, BothPacksDecodeIdentically) {
  for (const std::string tensor : {"blk.0.ffn_gate.weight__row0", "blk.0.ssm_out.weight__row3"}) {
    const std::vector<RowCase> rows = ReadIndex();
    const RowCase* pq = nullptr;
    const RowCase* ptq = nullptr;
    for (const RowCase& r : rows) {
      if (r.file.find(tensor) == std::string::npos) continue;
      (r.pack == "pq2_0" ? pq : ptq) = &r;
    }
    ASSERT_TRUE(pq != nullptr && ptq != nullptr);
    const std::string pq_bytes = ReadFileOrDie(TestDataPath("prism/rows/" + pq->file));
    EXPECT_EQ(Decode(*pq, pq_bytes),
              Decode(*ptq, ReadFileOrDie(TestDataPath("prism/rows/" + ptq->file))));
    // The released PQ2_0 rows never use code 3.
    for (size_t b = 0; b < pq_bytes.size() / 34; ++b) {
      uint8_t codes[128];
      block_pq2_0 blk;
      std::memcpy(&blk, pq_bytes.data() + b * 34, 34);
      UnpackBlockPq2_0(blk, codes);
      for (uint8_t c : codes) ASSERT_LT(c, 3);
    }
  }
}

TEST(TernaryCodec, Pq2CodeThreeIsPlusTwoD) {
  uint8_t codes[128] = {};
  for (int j = 0; j < 128; ++j) codes[j] = static_cast<uint8_t>(j % 4);
  block_pq2_0 blk;
  PackBlockPq2_0(codes, FloatToFp16(0.5f), &blk);
  float out[128];
  DequantizeRowPq2_0Ref(&blk, out, 128);
  for (int j = 0; j < 128; ++j) EXPECT_EQ(out[j], (j % 4 - 1) * 0.5f);
  // Element j sits at bits 2*(j & 3) of qs[j >> 2]: sequential, not TQ2_0's 32-stride layout.
  EXPECT_EQ(blk.qs[0], 0b11100100);
}

TEST(TernaryCodec, PackUnpackRoundTripRandom) {
  std::mt19937 gen(3);
  for (int iter = 0; iter < 200; ++iter) {
    uint8_t trits[128], back[128];
    for (uint8_t& t : trits) t = gen() % 3;
    block_ptq1_0 blk;
    PackBlockPtq1_0(trits, 0x3c00, &blk);
    UnpackBlockPtq1_0(blk, back);
    ASSERT_EQ(0, std::memcmp(trits, back, 128));
    uint8_t codes[128], codes_back[128];
    for (uint8_t& c : codes) c = gen() % 4;
    block_pq2_0 pq;
    PackBlockPq2_0(codes, 0x3c00, &pq);
    UnpackBlockPq2_0(pq, codes_back);
    ASSERT_EQ(0, std::memcmp(codes, codes_back, 128));
  }
}

TEST(TernaryCodec, Ptq1ElementOrderFollowsStages) {
  // A single +1 at element e must come back at e, for every e.
  for (int e = 0; e < 128; ++e) {
    uint8_t trits[128];
    std::memset(trits, 1, sizeof trits);
    trits[e] = 2;
    block_ptq1_0 blk;
    PackBlockPtq1_0(trits, FloatToFp16(1.0f), &blk);
    float out[128];
    DequantizeRowPtq1_0Ref(&blk, out, 128);
    for (int j = 0; j < 128; ++j) ASSERT_EQ(out[j], j == e ? 1.0f : 0.0f) << e << " " << j;
    // Stage rule: e < 80 lives in qs[e % 16]; 80 <= e < 120 in qs[16 + (e - 80) % 8]; else qh.
    int byte = e < 80 ? e % 16 : e < 120 ? 16 + (e - 80) % 8 : 24 + (e - 120) % 2;
    const uint8_t* raw = reinterpret_cast<const uint8_t*>(&blk);
    block_ptq1_0 zero;
    uint8_t ones[128];
    std::memset(ones, 1, sizeof ones);
    PackBlockPtq1_0(ones, FloatToFp16(1.0f), &zero);
    const uint8_t* raw0 = reinterpret_cast<const uint8_t*>(&zero);
    for (int b = 0; b < 26; ++b) ASSERT_EQ(raw[b] != raw0[b], b == byte) << e << " " << b;
  }
}

TEST(FloatConvert, Fp16RoundTripsExhaustively) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToFp16(f), h) << std::hex << h;
  }
  EXPECT_EQ(Fp16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7c00);                      // rounds to infinity
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);         // tie to even (zero)
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(NAN))));
}

TEST(FloatConvert, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBf16(BitsFloat(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(FloatToBf16(BitsFloat(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
}

}  // namespace
}  // namespace walsh
