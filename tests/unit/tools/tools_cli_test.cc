// The walsh-inspect, walsh-mkmodel and walsh-bench vision binaries driven as a user runs them
// (real processes).
#include <cstring>
#include <sstream>
#include <vector>

#include "common/sha256.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"

namespace walsh {
namespace {

using testing::ReadFileOrDie;
using testing::RunProcess;
using testing::TempDir;
using testing::TestDataPath;

TEST(InspectCli, SummarizesThePeerModel) {
  // fixtures/peer/model.gguf was written by another project's GGUF writer.
  const auto r = RunProcess({WALSH_INSPECT_BIN, TestDataPath("peer/model.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("qwen35: 4 layers (3 Gated DeltaNet, 1 full attention)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("prism.hadamard v1, block 128, signs explicit [256, 512], 26 folded"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("PQ2_0"), std::string::npos);

  const auto j = RunProcess({WALSH_INSPECT_BIN, "--json", TestDataPath("peer/model.gguf")});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["config"]["embedding_length"], 256);
  EXPECT_EQ(doc["config"]["head_count_kv"], 1);
  EXPECT_EQ(doc["contract"]["folded"], 26);
  EXPECT_EQ(doc["contract"]["gdn_v_grouped"], false);
  EXPECT_EQ(doc["tensor_types"]["PQ2_0"]["count"], 27);
  EXPECT_DOUBLE_EQ(doc["bits_per_weight"]["ternary"].get<double>(), 2.125);
}

TEST(InspectCli, RefusedFileExitsNonZeroWithReason) {
  TempDir dir;
  std::string bytes = ReadFileOrDie(TestDataPath("peer/model.gguf"));
  const std::string from = "normalized-sylvester-walsh-hadamard";
  const size_t pos = bytes.find(from);
  ASSERT_NE(pos, std::string::npos);
  bytes.replace(pos, 10, "sequency-w");  // same length: the file stays well formed
  testing::WriteFileOrDie(dir.File("bad.gguf"), bytes);
  const auto r = RunProcess({WALSH_INSPECT_BIN, dir.File("bad.gguf")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("prism.hadamard.transform"), std::string::npos) << r.err;

  const auto missing = RunProcess({WALSH_INSPECT_BIN, dir.File("nope.gguf")});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("nope.gguf"), std::string::npos) << missing.err;

  const auto usage = RunProcess({WALSH_INSPECT_BIN, "--bogus"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("--bogus"), std::string::npos);
}

TEST(InspectCli, DecodeRowMatchesReleasedDigests) {
  std::istringstream index(ReadFileOrDie(TestDataPath("prism/rows/index.tsv")));
  std::string line;
  std::getline(index, line);
  int checked = 0;
  while (std::getline(index, line)) {
    std::istringstream f(line);
    std::string file, pack, tensor, row, width, sha;
    f >> file >> pack >> tensor >> row >> width >> sha;
    const auto r = RunProcess({WALSH_INSPECT_BIN, "decode-row", "--type", pack, "--width", width},
                              ReadFileOrDie(TestDataPath("prism/rows/" + file)));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<float> v(r.out.size() / 4);
    std::memcpy(v.data(), r.out.data(), r.out.size());
    for (float& x : v) x = x == 0.0f ? 0.0f : x;
    EXPECT_EQ(Sha256Hex(v.data(), v.size() * 4), sha) << file;
    ++checked;
  }
  EXPECT_EQ(checked, 4);
  const auto short_input =
      RunProcess({WALSH_INSPECT_BIN, "decode-row", "--type", "pq2_0", "--width", "256"}, "abc");
  EXPECT_EQ(short_input.exit_code, 1);
  EXPECT_NE(short_input.err.find("expected 68"), std::string::npos) << short_input.err;
}

TEST(MkmodelCli, WritesAModelInspectAccepts) {
  TempDir dir;
  const auto mk = RunProcess({WALSH_MKMODEL_BIN, "--preset", "tiny", "--format", "ptq1_0", "--out",
                              dir.File("t.gguf"), "--dense-out", dir.File("d.gguf")});
  ASSERT_EQ(mk.exit_code, 0) << mk.err;
  const auto r = RunProcess({WALSH_INSPECT_BIN, dir.File("t.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("PTQ1_0"), std::string::npos);
  EXPECT_NE(r.out.find("1.7500 over ternary tensors"), std::string::npos) << r.out;
  // The dense reference has no contract, so it is (rightly) refused as a servable model.
  const auto dense = RunProcess({WALSH_INSPECT_BIN, dir.File("d.gguf")});
  EXPECT_EQ(dense.exit_code, 1);
  EXPECT_NE(dense.err.find("prism.hadamard.version"), std::string::npos) << dense.err;

  const auto bad = RunProcess({WALSH_MKMODEL_BIN, "--format", "q4_0", "--out", dir.File("x")});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--format"), std::string::npos) << bad.err;
}

// walsh-bench vision on the CPU: a row per side with the tokens the resize rule gives, a time and
// a rate; a side off the grid, a bad device and an unknown preset refused by name.
TEST(BenchCli, VisionTimesEachSide) {
  TempDir dir;
  const auto r = RunProcess({WALSH_BENCH_BIN, "vision", "--preset", "small", "--sides", "64,96",
                             "--threads", "2", "--repeat", "2", "--json", dir.File("v.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| 96² | 9 | 36 |"), std::string::npos) << r.out;
  const nlohmann::json doc = nlohmann::json::parse(ReadFileOrDie(dir.File("v.json")));
  EXPECT_EQ(doc["device"], "cpu");
  EXPECT_EQ(doc["threads"], 2);
  ASSERT_EQ(doc["images"].size(), 2u);
  EXPECT_EQ(doc["images"][0]["tokens"], 4);
  EXPECT_EQ(doc["images"][1]["patches"], 36);
  for (const auto& image : doc["images"]) {
    EXPECT_GT(image["seconds"].get<double>(), 0.0);
    EXPECT_GT(image["gflop_per_s"].get<double>(), 0.0);
  }

  const auto off_grid = RunProcess({WALSH_BENCH_BIN, "vision", "--sides", "64,48"});
  EXPECT_EQ(off_grid.exit_code, 2);
  EXPECT_NE(off_grid.err.find("--sides: \"48\" is not a positive multiple of 32"),
            std::string::npos)
      << off_grid.err;
  const auto device = RunProcess({WALSH_BENCH_BIN, "vision", "--device", "tpu"});
  EXPECT_EQ(device.exit_code, 2);
  EXPECT_NE(device.err.find("--device must be cpu or cuda"), std::string::npos) << device.err;
  const auto preset = RunProcess({WALSH_BENCH_BIN, "vision", "--preset", "huge"});
  EXPECT_EQ(preset.exit_code, 1);
  EXPECT_NE(preset.err.find("--preset huge"), std::string::npos) << preset.err;
}

}  // namespace
}  // namespace walsh
