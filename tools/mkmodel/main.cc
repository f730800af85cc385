// walsh-mkmodel: writes synthetic qwen35 models that satisfy the whole Prism contract.
#include <chrono>
#include <cstdio>
#include <string>

#include "common/cli_flags.h"
#include "tools/mkmodel/synthetic_mmproj.h"
#include "tools/mkmodel/synthetic_model.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "walsh-mkmodel: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "tiny", format = "pq2_0", signs = "random", signs_json, out, dense_out;
  std::string tokenizer_json, mmproj_out, mmproj_type = "f16";
  uint64_t seed = 1;
  int64_t layers = 0;
  walsh::FlagSet flags(
      "walsh-mkmodel --out FILE [--preset tiny|small|27b] [--format pq2_0|ptq1_0] [--seed N] "
      "[--signs random|real] [--layers N] [--dense-out FILE] [--mmproj-out FILE]");
  flags.String("out", &out, "output GGUF path (required)");
  flags.String("preset", &preset, "tiny | small | 27b");
  flags.String("format", &format, "weight format: pq2_0 | ptq1_0");
  flags.Uint64("seed", &seed, "seed; the same arguments always give a byte-identical file");
  flags.String("signs", &signs, "random | real (the released 27B sign vectors; 27b preset only)");
  flags.String("signs-json", &signs_json,
               "JSON copy of the released prism.hadamard block (default: tests/data/prism/)");
  flags.Int("layers", &layers, "override the preset's layer count (0 keeps it)");
  flags.String("dense-out", &dense_out,
               "also write the unfolded F32 network (tiny/small only) for engine reference tests");
  flags.String("tokenizer-json", &tokenizer_json,
               "use this Hugging Face tokenizer.json's vocabulary instead of the synthetic one");
  flags.String("mmproj-out", &mmproj_out,
               "also write a vision projector (an mmproj file, docs/vision.md) of the preset's "
               "size that feeds this model (27b: the released projector's tensors and shapes)");
  flags.String("mmproj-type", &mmproj_type,
               "the projector's matrices: f32 | f16 | bf16 | q8_0 (rows not a multiple of 32 stay "
               "f16, as in the released file)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "walsh-mkmodel: %s\n%s", std::string(s.message()).c_str(),
                 flags.Help().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  walsh::SyntheticModelOptions opts;
  opts.preset = preset;
  if (format == "pq2_0") {
    opts.format = walsh::TernaryFormat::kPq2_0;
  } else if (format == "ptq1_0") {
    opts.format = walsh::TernaryFormat::kPtq1_0;
  } else {
    return Fail("--format must be pq2_0 or ptq1_0, not \"" + format + "\"");
  }
  if (signs != "random" && signs != "real") {
    return Fail("--signs must be random or real, not \"" + signs + "\"");
  }
  opts.signs = signs == "real" ? walsh::SignSource::kReal : walsh::SignSource::kRandom;
  opts.real_signs_path = signs_json;
  opts.seed = seed;
  opts.layers = layers;
  opts.tokenizer_json = tokenizer_json;
  if (out.empty() || !flags.positional().empty()) return Fail("usage: --out FILE is required");
  walsh::SyntheticMmprojOptions mmproj;
  mmproj.preset = preset;
  mmproj.seed = seed;
  if (mmproj_type == "f32") {
    mmproj.weight_type = walsh::kGgmlF32;
  } else if (mmproj_type == "f16") {
    mmproj.weight_type = walsh::kGgmlF16;
  } else if (mmproj_type == "bf16") {
    mmproj.weight_type = walsh::kGgmlBf16;
  } else if (mmproj_type == "q8_0") {
    mmproj.weight_type = walsh::kGgmlQ8_0;
  } else {
    return Fail("--mmproj-type must be f32, f16, bf16 or q8_0, not \"" + mmproj_type + "\"");
  }

  const auto start = std::chrono::steady_clock::now();
  auto model = walsh::SyntheticModel::Create(opts);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  absl::Status status = (*model)->WritePacked(out);
  if (status.ok() && !dense_out.empty()) status = (*model)->WriteDense(dense_out);
  if (status.ok() && !mmproj_out.empty()) {
    mmproj.text_embedding_length = (*model)->preset().config.embedding_length;
    status = walsh::WriteSyntheticMmproj(mmproj, mmproj_out);
  }
  if (!status.ok()) return Fail(std::string(status.message()));
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "walsh-mkmodel: wrote %s (preset %s, %s, seed %llu) in %.1f s\n",
               out.c_str(), preset.c_str(), format.c_str(), static_cast<unsigned long long>(seed),
               secs);
  return 0;
}
