// One decode step (batch of 1 sequence, 1 new token) of the small preset after a 64-token
// prompt, and a 64-token prefill. Reports tokens/s and weight bytes read per second.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>

#include "tools/mkmodel/synthetic_model.h"
#include "worker/engine/solo_runner.h"

namespace walsh {
namespace {

std::unique_ptr<SoloRunner> MakeEngine(const std::string& format, int threads,
                                       int64_t* weight_bytes, int tp = 1) {
  const std::string path =
      std::filesystem::temp_directory_path() /
      ("walsh-bench-small-" + format + "-" + std::to_string(::getpid()) + ".gguf");
  auto model = SyntheticModel::Create(
      {.preset = "small",
       .format = format == "pq2_0" ? TernaryFormat::kPq2_0 : TernaryFormat::kPtq1_0});
  if (!model.ok() || !(*model)->WritePacked(path).ok()) return nullptr;
  auto file = LoadModelFile(path);
  std::filesystem::remove(path);  // the mapping stays valid
  if (!file.ok()) return nullptr;
  *weight_bytes = 0;
  for (const GgufTensorInfo& t : file->gguf->tensors()) {
    if (t.name != "token_embd.weight") *weight_bytes += static_cast<int64_t>(t.n_bytes);
  }
  auto bound = Model::Bind(std::move(*file));
  if (!bound.ok()) return nullptr;
  auto engine = SoloRunner::Create(std::move(*bound), {.threads = threads, .tp = tp});
  return engine.ok() ? std::move(*engine) : nullptr;
}

// args: format (0 = pq2_0, 1 = ptq1_0), threads
void BM_DecodeStepSmall(benchmark::State& state) {
  int64_t weight_bytes = 0;
  auto engine = MakeEngine(state.range(0) == 0 ? "pq2_0" : "ptq1_0",
                           static_cast<int>(state.range(1)), &weight_bytes);
  if (!engine) {
    state.SkipWithError("cannot build the small model");
    return;
  }
  auto seq = engine->AddSequence();
  std::vector<int32_t> prompt(64);
  for (int i = 0; i < 64; ++i) prompt[i] = 300 + i;
  (void)engine->Forward({{*seq, prompt}});
  int32_t next = 7;
  for (auto _ : state) {
    auto out = engine->Forward({{*seq, {next}}});
    if (!out.ok() || *engine->SequenceLength(*seq) >= engine->max_context() - 1) {
      state.SkipWithError("decode failed");
      break;
    }
    next = static_cast<int32_t>(out->rows.size());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(state.iterations() * weight_bytes);
}
BENCHMARK(BM_DecodeStepSmall)
    ->Args({0, 1})
    ->Args({0, 2})
    ->Args({1, 1})
    ->Args({1, 2})
    ->ArgNames({"ptq1", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// args: tensor-parallel CPU ranks (one thread each)
void BM_DecodeStepSmallTp(benchmark::State& state) {
  int64_t weight_bytes = 0;
  auto engine = MakeEngine("pq2_0", 1, &weight_bytes, static_cast<int>(state.range(0)));
  if (!engine) {
    state.SkipWithError("cannot build the small model");
    return;
  }
  auto seq = engine->AddSequence();
  std::vector<int32_t> prompt(64);
  for (int i = 0; i < 64; ++i) prompt[i] = 300 + i;
  (void)engine->Forward({{*seq, prompt}});
  for (auto _ : state) {
    if (!engine->Forward({{*seq, {7}}}).ok() ||
        *engine->SequenceLength(*seq) >= engine->max_context() - 1) {
      state.SkipWithError("decode failed");
      break;
    }
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeStepSmallTp)
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->ArgName("tp")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_PrefillSmall(benchmark::State& state) {
  int64_t weight_bytes = 0;
  auto engine = MakeEngine("pq2_0", static_cast<int>(state.range(0)), &weight_bytes);
  if (!engine) {
    state.SkipWithError("cannot build the small model");
    return;
  }
  std::vector<int32_t> prompt(64);
  for (int i = 0; i < 64; ++i) prompt[i] = 300 + i;
  for (auto _ : state) {
    auto seq = engine->AddSequence();
    (void)engine->Forward({{*seq, prompt}});
    (void)engine->RemoveSequence(*seq);
  }
  state.counters["tokens/s"] =
      benchmark::Counter(64.0 * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PrefillSmall)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("threads")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace walsh
