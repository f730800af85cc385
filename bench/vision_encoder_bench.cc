// Image encoding on the CPU at the released projector's shape (27 blocks of 1152, patch 16, F16
// weights from walsh-mkmodel's 27b projector preset): seconds per image and rows for the text
// model, at 448², 1024² and 2048² (196, 1,024 and 4,096 tokens), on every core; and its linear
// layers' kernel alone, per path.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/f32_matmul.h"
#include "kernels/cpu/isa.h"
#include "tools/mkmodel/synthetic_mmproj.h"
#include "worker/model/gguf_file.h"
#include "worker/vision/encode_cost.h"
#include "worker/vision/vision_encoder.h"

namespace walsh {
namespace {

const VisionEncoder& Released() {
  static const VisionEncoder* encoder = [] {
    const std::string path = "/tmp/walsh_bench_27b.mmproj.gguf";
    if (!WriteSyntheticMmproj({.preset = "27b", .text_embedding_length = 5120}, path).ok()) {
      std::abort();
    }
    auto file = GgufFile::Open(path);
    auto config = ParseMmprojConfig(**file);
    auto weights = VisionWeights::Load(**file, *config);
    std::remove(path.c_str());
    return new VisionEncoder(std::move(*weights));
  }();
  return *encoder;
}

// arg: the image's side in pixels
void BM_EncodeImage27bShape(benchmark::State& state) {
  const VisionEncoder& encoder = Released();
  const int64_t side = state.range(0);
  PixelValues px{.height = side, .width = side};
  px.planes.assign(3 * side * side, 0.25f);
  ThreadPool pool(static_cast<int>(std::thread::hardware_concurrency()));
  for (auto _ : state) benchmark::DoNotOptimize(encoder.Encode(px, &pool));
  const double flop = EncodeFlop(encoder.config(), side, side);
  state.counters["tokens"] = static_cast<double>(px.Tokens(16, 2));
  state.counters["threads"] = pool.threads();
  state.counters["GFLOP/s"] = benchmark::Counter(
      flop * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
// One block's feed-forward up projection at 448² (784 patches, 1152 → 4304), one thread, per
// kernel path (arg: 0 scalar, 1 AVX2): the linear layers are most of an encode's work.
void BM_EncoderLinear(benchmark::State& state) {
  const CpuIsa isa = state.range(0) == 0 ? CpuIsa::kScalar : CpuIsa::kAvx2;
  if (!CpuSupports(isa)) return state.SkipWithError("this CPU lacks the path");
  constexpr int64_t n = 784, in = 1152, out = 4304;
  std::vector<float> x(n * in), w(out * in), b(out), y(n * out);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) * 0.01f - 0.4f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 89) * 0.001f - 0.04f;
  for (auto _ : state) {
    for (int64_t o0 = 0; o0 < out; o0 += 32) {
      for (int64_t i0 = 0; i0 < n; i0 += 48) {
        F32MatMulTileRun(isa, x.data(), in, w.data(), b.data(), out,
                         {i0, std::min(n, i0 + 48), o0, std::min(out, o0 + 32)}, y.data());
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(CpuIsaName(isa));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * in * out * 1e-9 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EncoderLinear)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

BENCHMARK(BM_EncodeImage27bShape)
    ->Arg(448)
    ->Arg(1024)
    ->Arg(2048)
    ->ArgName("side")
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace
}  // namespace walsh
