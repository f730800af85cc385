// walsh-inspect: checks a GGUF file against the qwen35 + Prism contract and summarizes it.
//   walsh-inspect [--json] FILE
//   walsh-inspect decode-row --type pq2_0|ptq1_0 --width N  < blocks > row.f32
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/cli_flags.h"
#include "kernels/block_types.h"
#include "kernels/ternary_codec_ref.h"
#include "tools/inspect/model_summary.h"
#include "tools/inspect/shard_plan_json.h"
#include "worker/model/model_file.h"
#include "worker/parallel/shard_plan.h"

namespace {

int DecodeRow(const std::string& type, int64_t width) {
  size_t block_bytes;
  if (type == "pq2_0") {
    block_bytes = sizeof(walsh::block_pq2_0);
  } else if (type == "ptq1_0") {
    block_bytes = sizeof(walsh::block_ptq1_0);
  } else {
    std::fprintf(stderr, "walsh-inspect decode-row: --type must be pq2_0 or ptq1_0\n");
    return 2;
  }
  if (width <= 0 || width % walsh::kTernaryBlockElems != 0) {
    std::fprintf(stderr, "walsh-inspect decode-row: --width must be a positive multiple of 128\n");
    return 2;
  }
  std::vector<uint8_t> in;
  uint8_t buf[1 << 16];
  ssize_t n;
  while ((n = ::read(STDIN_FILENO, buf, sizeof buf)) > 0) in.insert(in.end(), buf, buf + n);
  const size_t expected = static_cast<size_t>(width) / walsh::kTernaryBlockElems * block_bytes;
  if (n < 0 || in.size() != expected) {
    std::fprintf(stderr, "walsh-inspect decode-row: read %zu bytes from stdin, expected %zu\n",
                 in.size(), expected);
    return 1;
  }
  std::vector<float> row(width);
  if (type == "pq2_0") {
    walsh::DequantizeRowPq2_0Ref(reinterpret_cast<const walsh::block_pq2_0*>(in.data()), row.data(),
                                 width);
  } else {
    walsh::DequantizeRowPtq1_0Ref(reinterpret_cast<const walsh::block_ptq1_0*>(in.data()),
                                  row.data(), width);
  }
  return std::fwrite(row.data(), sizeof(float), row.size(), stdout) == row.size() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  int64_t tp = 0;
  std::string type;
  int64_t width = 0;
  walsh::FlagSet flags(
      "walsh-inspect [--json] FILE\n"
      "       walsh-inspect decode-row --type pq2_0|ptq1_0 --width N < blocks > row.f32");
  flags.Bool("json", &json, "print the summary as JSON");
  flags.Int("tp", &tp, "print the tensor-parallel shard plan for this many ranks");
  flags.String("type", &type, "decode-row: block type, pq2_0 or ptq1_0");
  flags.Int("width", &width, "decode-row: row width in weights (a multiple of 128)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "walsh-inspect: %s\n%s", std::string(s.message()).c_str(),
                 flags.Help().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  const std::vector<std::string>& args = flags.positional();
  if (args.size() == 1 && args[0] == "decode-row") return DecodeRow(type, width);
  if (args.size() != 1) {
    std::fputs(flags.Help().c_str(), stderr);
    return 2;
  }
  absl::StatusOr<walsh::ModelFile> model = walsh::LoadModelFile(args[0]);
  if (!model.ok()) {
    std::fprintf(stderr, "walsh-inspect: refused: %s\n",
                 std::string(model.status().message()).c_str());
    return 1;
  }
  if (tp > 0) {
    absl::StatusOr<walsh::ShardPlan> plan = walsh::ShardPlan::Build(*model, static_cast<int>(tp));
    if (!plan.ok()) {
      std::fprintf(stderr, "walsh-inspect: %s\n", std::string(plan.status().message()).c_str());
      return 1;
    }
    std::fputs((json ? walsh::ShardPlanJson(*plan) : plan->DebugString()).c_str(), stdout);
    return 0;
  }
  const std::string out = json ? walsh::ModelSummaryJson(*model) : walsh::ModelSummaryText(*model);
  std::fputs(out.c_str(), stdout);
  return 0;
}
