// The sampler's cost per token at the 27B vocabulary (248,320): greedy, temperature with and
// without top-p, and with the top-5 logprobs, on logits shaped like a model's (normal, sd 3).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "worker/engine/sampler.h"

namespace walsh {
namespace {

// args: temperature x 10, top_p x 100, logprobs
void BM_SampleVocab248k(benchmark::State& state) {
  const int64_t vocab = 248320;
  std::mt19937 gen(3);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = d(gen);
  SamplingParams p;
  p.temperature = static_cast<float>(state.range(0)) / 10.0f;
  p.top_p = static_cast<float>(state.range(1)) / 100.0f;
  p.logprobs = static_cast<int32_t>(state.range(2));
  p.seed = 7;
  const std::vector<int32_t> prompt = {1, 2, 3}, output;
  int64_t index = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(Sample(logits.data(), vocab, p, prompt, output, index++));
  }
}
BENCHMARK(BM_SampleVocab248k)
    ->Args({0, 100, 0})
    ->Args({7, 100, 0})
    ->Args({7, 90, 0})
    ->Args({7, 90, 5})
    ->ArgNames({"temp_x10", "top_p_x100", "logprobs"})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace walsh
