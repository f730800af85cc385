// Ternary mat-vec and multi-token products at the 27B shapes (both formats, each ISA path, 1-2
// threads), the machine's memory read bandwidth and int8 multiply-add peak for comparison, and
// a decode step of the small preset.
//   build/bench/walsh_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/block_types.h"
#include "kernels/cpu/int8_peak.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/float_convert.h"
#include "kernels/ternary_codec_ref.h"
#include "kernels/weight_format.h"

namespace walsh {
namespace {

struct Matrix {
  std::vector<uint8_t> bytes;
  TernaryWeights w;
};

Matrix MakeMatrix(TernaryFormat format, int64_t rows, int64_t cols) {
  Matrix m;
  const size_t block = FormatTraits(format).block_bytes;
  m.bytes.resize(rows * cols / 128 * block);
  std::mt19937 gen(1);
  uint8_t codes[128];
  for (size_t b = 0; b < m.bytes.size() / block; ++b) {
    for (uint8_t& c : codes) c = gen() % 3;
    if (format == TernaryFormat::kPq2_0) {
      PackBlockPq2_0(codes, FloatToFp16(0.01f), reinterpret_cast<block_pq2_0*>(m.bytes.data()) + b);
    } else {
      PackBlockPtq1_0(codes, FloatToFp16(0.01f),
                      reinterpret_cast<block_ptq1_0*>(m.bytes.data()) + b);
    }
  }
  m.w = {format, m.bytes.data(), rows, cols};
  return m;
}

// `tokens` rows of normal activations, quantized in the format's layout.
std::vector<Q8Block128> QuantizedInput(TernaryFormat format, int64_t cols, int64_t tokens) {
  std::vector<float> x(tokens * cols);
  std::mt19937 gen(2);
  std::normal_distribution<float> dist;
  for (float& v : x) v = dist(gen);
  std::vector<Q8Block128> q(tokens * cols / 128);
  QuantizeRowQ8(x.data(), tokens * cols, Q8LayoutFor(format), q.data());
  return q;
}

// args: type, rows, cols, isa, threads
void BM_TernaryMatVec(benchmark::State& state) {
  const TernaryFormat format = static_cast<TernaryFormat>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  const CpuIsa isa = static_cast<CpuIsa>(state.range(3));
  if (!CpuSupports(isa)) {
    state.SkipWithError("ISA not supported here");
    return;
  }
  const Matrix m = MakeMatrix(format, rows, cols);
  const std::vector<Q8Block128> q = QuantizedInput(format, cols, 1);
  std::vector<float> y(rows);
  ThreadPool pool(static_cast<int>(state.range(4)));
  for (auto _ : state) {
    pool.ParallelFor(rows, 64, [&](int64_t r0, int64_t r1) {
      TernaryMatMulQ8(isa, m.w, q.data(), 1, y.data(), rows, r0, r1);
    });
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.bytes.size()));
  state.SetLabel(std::string(FormatTraits(format).name) + " " + CpuIsaName(isa));
}

void MatVecArgs(benchmark::internal::Benchmark* b) {
  for (int type :
       {static_cast<int>(TernaryFormat::kPq2_0), static_cast<int>(TernaryFormat::kPtq1_0)}) {
    for (auto [rows, cols] :
         {std::pair{17408, 5120}, std::pair{5120, 17408}, std::pair{5120, 6144}}) {
      for (int isa : {0, 1, 2, 3}) {
        for (int threads : {1, 2}) {
          if (isa == 0 && threads == 2) continue;
          b->Args({type, rows, cols, isa, threads});
        }
      }
    }
  }
  b->ArgNames({"type", "rows", "cols", "isa", "threads"})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_TernaryMatVec)->Apply(MatVecArgs);

// args: type, rows, cols, tokens, threads; the best ISA this machine runs. MAC/s counts one
// multiply-add per weight per token.
void BM_TernaryMatMul(benchmark::State& state) {
  const TernaryFormat format = static_cast<TernaryFormat>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), tokens = state.range(3);
  const Matrix m = MakeMatrix(format, rows, cols);
  const std::vector<Q8Block128> q = QuantizedInput(format, cols, tokens);
  std::vector<float> y(tokens * rows);
  ThreadPool pool(static_cast<int>(state.range(4)));
  const CpuIsa isa = BestCpuIsa();
  for (auto _ : state) {
    pool.ParallelFor(rows, 64, [&](int64_t r0, int64_t r1) {
      TernaryMatMulQ8(isa, m.w, q.data(), tokens, y.data(), rows, r0, r1);
    });
    benchmark::DoNotOptimize(y.data());
  }
  const double macs = static_cast<double>(rows) * cols * tokens;
  state.counters["GMAC/s"] =
      benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.bytes.size()));
  state.SetLabel(std::string(FormatTraits(format).name) + " " + CpuIsaName(isa));
}

void MatMulArgs(benchmark::internal::Benchmark* b) {
  for (int type :
       {static_cast<int>(TernaryFormat::kPq2_0), static_cast<int>(TernaryFormat::kPtq1_0)}) {
    for (auto [rows, cols] :
         {std::pair{17408, 5120}, std::pair{5120, 17408}, std::pair{5120, 6144}}) {
      for (int tokens : {1, 4, 16, 64, 512}) b->Args({type, rows, cols, tokens, 2});
    }
  }
  b->ArgNames({"type", "rows", "cols", "tokens", "threads"})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_TernaryMatMul)->Apply(MatMulArgs);

// The read bandwidth the mat-vec is measured against (kernels/cpu/memory_bandwidth.h: four
// load streams per thread, best of 5 passes over 2 GiB). args: threads
void BM_MemoryReadBandwidth(benchmark::State& state) {
  double best = 0;
  for (auto _ : state) best = MeasureReadBandwidth(static_cast<int>(state.range(0)));
  state.counters["GB/s"] = best / 1e9;
}
BENCHMARK(BM_MemoryReadBandwidth)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("threads")
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// The int8 multiply-add peak the batched products are measured against
// (kernels/cpu/int8_peak.h). args: instruction (0 vpmaddubsw, 1 vpdpbusd, 2 vpdpbusd on 512-bit
// registers), threads
void BM_Int8Peak(benchmark::State& state) {
  const auto instruction = static_cast<Int8PeakInstruction>(state.range(0));
  double best = 0;
  for (auto _ : state) best = MeasureInt8Peak(static_cast<int>(state.range(1)), instruction);
  if (best == 0) state.SkipWithError("instruction not supported here");
  state.counters["GMAC/s"] = best / 1e9;
}
BENCHMARK(BM_Int8Peak)
    ->ArgsProduct({{0, 1, 2}, {1, 2}})
    ->ArgNames({"instruction", "threads"})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace walsh
