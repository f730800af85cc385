// walsh-bench decode (and serve: serve.h): the engine's speed on one machine, in one run, as
// llama-bench reports it (pp: prompt tokens/s, tg: generated tokens/s), with the roofline: the
// weight bytes a decode step reads per second set against the read bandwidth measured in the same
// run (kernels/cpu/memory_bandwidth.h; on a GPU, the fraction is left to tests/gpu/run.sh's copy
// bandwidth). Any device, any tensor-parallel size; a table on stdout and, with --json, a file.
//
//   walsh-bench decode --model M.gguf [--threads N] [--batch 1,4,16] [--prompt 512] [--gen 32]
// walsh-bench constraint: structured output's cost (constraint_bench.h).
// walsh-bench vision: the vision encoder's speed, CPU or CUDA (vision_bench.h).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/cli_flags.h"
#include "common/huge_page_share.h"
#include "common/request_ranges.h"
#include "common/weights_memory.h"
#include "kernels/cpu/int8_peak.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "nlohmann/json.hpp"
#include "tools/bench/constraint_bench.h"
#include "tools/bench/oracle_speculation.h"
#include "tools/bench/report.h"
#include "tools/bench/stopwatch.h"
#include "tools/bench/vision_bench.h"
#include "worker/engine/engine.h"
#include "worker/engine/solo_runner.h"
#ifndef WALSH_ENGINE_ONLY
#include "tools/bench/serve.h"
#endif

namespace walsh {
namespace {

// Bytes of packed projection weights one decode step reads: every ternary matrix once (the
// embedding lookup, one row per token, is not counted).
int64_t ProjectionBytes(const Model& m) {
  int64_t total = m.output().w.bytes();
  for (const LayerWeights& L : m.layers()) {
    for (const Projection* p : {&L.attn.q, &L.attn.k, &L.attn.v, &L.attn.o, &L.gdn.qkv, &L.gdn.gate,
                                &L.gdn.out, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) {
      if (p->w.data != nullptr) total += p->w.bytes();
    }
  }
  return total;
}

// Ternary weights one token meets in a step: one multiply-add each.
int64_t ProjectionWeights(const Model& m) {
  int64_t total = m.output().w.rows * m.output().w.cols;
  for (const LayerWeights& L : m.layers()) {
    for (const Projection* p : {&L.attn.q, &L.attn.k, &L.attn.v, &L.attn.o, &L.gdn.qkv, &L.gdn.gate,
                                &L.gdn.out, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) {
      if (p->w.data != nullptr) total += p->w.rows * p->w.cols;
    }
  }
  return total;
}

struct TestProfile {
  std::string test;
  double seconds;
  int64_t steps;
  std::vector<OpProfile::Entry> ops;
};

// Each test's step profile: ms per step and share of the wall time for every backend op, and
// what ran outside them (the engine's own work: planning, sampling, logits copies).
void PrintProfiles(const std::vector<TestProfile>& profiles, nlohmann::json* doc) {
  for (const TestProfile& p : profiles) {
    std::printf("\nstep profile, %s (%lld steps, %.1f ms/step):\n", p.test.c_str(),
                static_cast<long long>(p.steps), 1e3 * p.seconds / p.steps);
    std::printf("| op                               | ms/step |  share |\n");
    std::printf("|----------------------------------|---------|--------|\n");
    double in_ops = 0;
    nlohmann::json ops = nlohmann::json::array();
    for (const OpProfile::Entry& e : p.ops) {
      in_ops += e.seconds;
      std::printf("| %-32s | %7.2f | %5.1f%% |\n", e.op.c_str(), 1e3 * e.seconds / p.steps,
                  100 * e.seconds / p.seconds);
      ops.push_back({{"op", e.op}, {"calls", e.calls}, {"seconds", e.seconds}});
    }
    std::printf("| %-32s | %7.2f | %5.1f%% |\n", "(outside backend ops)",
                1e3 * (p.seconds - in_ops) / p.steps, 100 * (p.seconds - in_ops) / p.seconds);
    (*doc)["profiles"].push_back(
        {{"test", p.test}, {"seconds", p.seconds}, {"steps", p.steps}, {"ops", ops}});
  }
}

int Decode(int argc, char** argv) {
  std::string model_path, device = "cpu", batches = "1", json_path, kv_cache_dtype = "fp16",
                          weights_memory = "auto";
  int64_t threads = 1, prompt_tokens = 512, gen_tokens = 32, prefill_chunk = 512, tp = 1;
  int64_t speculate = 0;
  double gpu_memory_utilization = 0.9;
  bool no_bandwidth = false, profile = false, mlock = false;
  FlagSet flags(
      "walsh-bench decode --model FILE [--device cpu|cuda] [--threads N] [--tp N] "
      "[--batch 1,4,16] [--prompt N] [--gen N] [--kv-cache-dtype fp16|q8|q4] [--json FILE]");
  flags.String("model", &model_path, "GGUF model file (required)");
  flags.String("device", &device, "cpu or cuda");
  flags.String("weights-memory", &weights_memory, kWeightsMemoryHelp);
  flags.Bool("mlock", &mlock, kMlockHelp);
  flags.Double("gpu-memory-utilization", &gpu_memory_utilization, "with --device cuda");
  flags.String("kv-cache-dtype", &kv_cache_dtype, "KV page storage: fp16, q8 or q4");
  flags.Int("threads", &threads, "CPU threads (per rank: 1 when --tp > 1)");
  flags.Int("tp", &tp, "tensor-parallel CPU ranks (1, 2, 4 or 8)");
  flags.String("batch", &batches, "decode batch sizes, comma-separated");
  flags.Int("prompt", &prompt_tokens, "prompt tokens for pp (prefill) and time to first token");
  flags.Int("prefill-chunk", &prefill_chunk, "prompt tokens per forward step");
  flags.Int("gen", &gen_tokens, "decode steps per batch size (tg)");
  flags.Int("speculate", &speculate,
            absl::StrCat("also sdK rows: each decode step verifies K drafts that are always right "
                         "(an oracle drafter: the ceiling of speculative decoding here), 0..",
                         request_ranges::kMaxSpeculativeTokens));
  flags.String("json", &json_path, "also write the results as JSON to this file");
  flags.Bool("no-bandwidth", &no_bandwidth, "skip the read-bandwidth and int8-peak measurements");
  flags.Bool("profile", &profile,
             "also print each test's step profile: time per backend op (CPU: wall time; CUDA: "
             "the stream's time between CUDA events around each launch)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    return Fail("walsh-bench", 2, std::string(s.message()) + "\n" + flags.Help());
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (profile && tp > 1) {
    return Fail("walsh-bench", 2,
                "--profile: ranks run their ops at once, so per-op wall times do not add up "
                "to a step; profile with --tp 1");
  }
  Device dev;
  std::vector<int64_t> batch_sizes;
  for (absl::string_view b : absl::StrSplit(batches, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(b, &v) || v < 1) {
      return Fail("walsh-bench", 2, "--batch: \"" + std::string(b) + "\" is not a batch size");
    }
    batch_sizes.push_back(v);
  }
  KvCacheDtype kv_dtype;
  if (model_path.empty() || !ParseDevice(device, &dev) || prompt_tokens < 1 || gen_tokens < 1 ||
      prefill_chunk < 1 || threads < 1 || !ParseKvCacheDtype(kv_cache_dtype, &kv_dtype) ||
      !request_ranges::kNumSpeculativeTokens.Contains(speculate)) {
    return Fail("walsh-bench", 2, "bad arguments\n" + flags.Help());
  }
  WeightsMemory memory;
  if (!ParseWeightsMemory(weights_memory, &memory)) {
    return Fail("walsh-bench", 2, std::string("--weights-memory must be ") + kWeightsMemoryNames);
  }
  if (!WeightsMemoryFitsDevice(memory, dev == Device::kCuda)) {
    return Fail("walsh-bench", 2, kHugePagesOnGpuError);
  }
  if (mlock && dev == Device::kCuda) return Fail("walsh-bench", 2, kMlockOnGpuError);
  auto file = LoadModelFile(model_path, WeightsMemoryFor(memory, dev == Device::kCuda), mlock);
  if (!file.ok()) return Fail("walsh-bench", 1, "refused: " + std::string(file.status().message()));
  const int64_t file_bytes = static_cast<int64_t>(file->gguf->file_size());
  auto bound = Model::Bind(std::move(*file));
  if (!bound.ok()) return Fail("walsh-bench", 1, std::string(bound.status().message()));
  int64_t max_batch = 1;
  for (int64_t b : batch_sizes) max_batch = std::max(max_batch, b);
  EngineOptions opts;
  opts.device = dev;
  opts.gpu_memory_utilization = gpu_memory_utilization;
  opts.kv_cache_dtype = kv_dtype;
  opts.threads = static_cast<int>(threads);
  opts.tp = static_cast<int>(tp);
  OpProfile op_profile;
  if (profile) opts.profile = &op_profile;
  CacheOptions caches;
  caches.state_slots = max_batch * (1 + speculate);  // a plane per draft
  caches.kv_pages =
      (max_batch * (16 + gen_tokens + speculate + 1) + prompt_tokens) / caches.page_size +
      2 * max_batch + 2;
  auto runner = SoloRunner::Create(std::move(*bound), opts, caches);
  if (!runner.ok()) return Fail("walsh-bench", 1, std::string(runner.status().message()));
  SoloRunner& r = **runner;
  Engine& e = r.engine();
  const int64_t vocab = e.model().config().vocab_size;
  const int64_t step_bytes = ProjectionBytes(e.model());
  // The yardstick, measured now, on the cores the engine uses.
  const int cores = static_cast<int>(tp > 1 ? tp : threads);
  // The yardstick reads through pages like the weights': transparent huge pages (advised) beside
  // a copy, small pages beside the file's mapping (whose page cache may hold some huge: the share
  // printed after the run says how much). Beside a hugetlb copy it is THP's, not the pool's.
  const WeightsMemory placed_in = e.model().gguf().memory().memory;
  const YardstickPages yardstick_pages =
      placed_in == WeightsMemory::kMmap ? YardstickPages::kSmall : YardstickPages::kHuge;
  const double bandwidth = dev == Device::kCpu && !no_bandwidth
                               ? MeasureReadBandwidth(cores, int64_t{2} << 30, 5, yardstick_pages)
                               : 0.0;
  // The int8 peak of the instruction the engine's kernels multiply with, on the same cores.
  const bool vnni = e.kernels() == CpuIsaName(CpuIsa::kAvx512Vnni) ||
                    e.kernels() == CpuIsaName(CpuIsa::kAvx512Vbmi);
  const double int8_peak = dev == Device::kCpu && !no_bandwidth
                               ? MeasureInt8Peak(cores, vnni ? Int8PeakInstruction::kDpbusd512
                                                             : Int8PeakInstruction::kMaddubs)
                               : 0.0;
  const double maddubs_peak =
      vnni && int8_peak > 0 ? MeasureInt8Peak(cores, Int8PeakInstruction::kMaddubs) : int8_peak;
  const int64_t step_weights = ProjectionWeights(e.model());
  std::mt19937 gen(1);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = static_cast<int32_t>(gen() % vocab);
    return ids;
  };
  nlohmann::json doc = {
      {"model", model_path},
      {"file_bytes", file_bytes},
      {"device", device},
      {"kernels", e.kernels()},
      {"threads", threads},
      {"tp", tp},
      {"weight_bytes_per_step", step_bytes},
      {"weights_per_token", step_weights},
      {"read_bandwidth_bytes_per_s", bandwidth},
      {"read_bandwidth_pages", yardstick_pages == YardstickPages::kHuge ? "thp" : "4k"},
      {"int8_peak_macs_per_s", int8_peak},
      {"int8_peak_instruction", int8_peak > 0 ? (vnni ? "vpdpbusd512" : "vpmaddubsw") : ""},
      {"maddubs_peak_macs_per_s", maddubs_peak}};
  std::printf(
      "model %s: %.3f GB of projections per decode step; %s, %s kernels, %lld thread(s), "
      "tp %lld\n",
      model_path.c_str(), step_bytes / 1e9, device.c_str(), e.kernels().c_str(),
      static_cast<long long>(threads), static_cast<long long>(tp));
  const WeightsMemoryChoice& placed = e.model().gguf().memory();
  const std::string reason = memory == WeightsMemory::kAuto && dev == Device::kCuda
                                 ? "auto: --device cuda"
                                 : placed.reason;
  std::printf("weights: %s (%s), read in %.1f s\n", WeightsMemoryName(placed.memory),
              reason.c_str(), e.model().gguf().read_seconds());
  doc["weights_memory"] = WeightsMemoryName(placed.memory);
  doc["weights_memory_reason"] = reason;
  doc["weights_read_seconds"] = e.model().gguf().read_seconds();
  if (bandwidth > 0) {
    std::printf("read bandwidth, same run: %.1f GB/s (%d thread(s), 4 streams each, %s pages)\n",
                bandwidth / 1e9, cores,
                yardstick_pages == YardstickPages::kHuge ? "transparent huge" : "4 KiB");
  }
  if (int8_peak > 0) {
    std::printf(
        "int8 multiply-add peak, same run: %.0f G/s (%s, %d thread(s)); vpmaddubsw %.0f G/s\n",
        int8_peak / 1e9, vnni ? "512-bit vpdpbusd" : "vpmaddubsw", cores, maddubs_peak / 1e9);
  }
  std::printf("| test        | batch |     t/s | ms/step | weight GB/s | roofline | int8 peak |\n");
  std::printf("|-------------|-------|---------|---------|-------------|----------|-----------|\n");
  std::vector<TestProfile> profiles;
  auto row = [&](const std::string& test, int64_t batch, double tokens_per_s, double step_s,
                 double weight_rate) {
    const double roofline = bandwidth > 0 ? weight_rate / bandwidth : 0.0;
    const double peak_share = int8_peak > 0 ? tokens_per_s * step_weights / int8_peak : 0.0;
    std::printf("| %-11s | %5lld | %7.1f | %7.2f | %11.2f | %s | %s |\n", test.c_str(),
                static_cast<long long>(batch), tokens_per_s, step_s * 1e3, weight_rate / 1e9,
                bandwidth > 0 ? absl::StrFormat("%7.1f%%", 100 * roofline).c_str() : "      - ",
                int8_peak > 0 ? absl::StrFormat("%8.1f%%", 100 * peak_share).c_str() : "       - ");
    doc["tests"].push_back({{"test", test},
                            {"batch", batch},
                            {"tokens_per_s", tokens_per_s},
                            {"ms_per_step", step_s * 1e3},
                            {"weight_bytes_per_s", weight_rate},
                            {"roofline_fraction", roofline},
                            {"int8_peak_fraction", peak_share}});
  };

  {  // One token first, outside the table: it faults every weight page of the mapping in.
    auto seq = r.AddSequence();
    if (!seq.ok()) return Fail("walsh-bench", 3, std::string(seq.status().message()));
    const auto t = std::chrono::steady_clock::now();
    if (auto out = r.Forward({{*seq, random_tokens(1)}}); !out.ok()) {
      return Fail("walsh-bench", 3, std::string(out.status().message()));
    }
    doc["first_step_seconds"] = Since(t);
    (void)r.RemoveSequence(*seq);
  }
  {  // pp: the whole prompt in chunks, up to its first logits (the time to first token).
    auto seq = r.AddSequence();
    if (!seq.ok()) return Fail("walsh-bench", 3, std::string(seq.status().message()));
    const std::vector<int32_t> prompt = random_tokens(prompt_tokens);
    op_profile.Reset();
    const auto t = std::chrono::steady_clock::now();
    int64_t steps = 0;
    for (int64_t i = 0; i < prompt_tokens; i += prefill_chunk, ++steps) {
      std::vector<int32_t> part(prompt.begin() + i,
                                prompt.begin() + std::min(prompt_tokens, i + prefill_chunk));
      if (auto out = r.Forward({{*seq, part}}); !out.ok()) {
        return Fail("walsh-bench", 3, std::string(out.status().message()));
      }
    }
    const double s = Since(t);
    row("pp" + std::to_string(prompt_tokens), 1, prompt_tokens / s, s / steps,
        steps * static_cast<double>(step_bytes) / s);
    profiles.push_back({"pp" + std::to_string(prompt_tokens), s, steps, op_profile.Entries()});
    (void)r.RemoveSequence(*seq);
  }
  for (int64_t b : batch_sizes) {  // tg: b sequences stepping together
    std::vector<SequenceInput> batch;
    for (int64_t i = 0; i < b; ++i) {
      auto seq = r.AddSequence();
      if (!seq.ok()) return Fail("walsh-bench", 3, std::string(seq.status().message()));
      batch.push_back({*seq, random_tokens(16)});
    }
    for (int warm = 0; warm < 2; ++warm) {  // the prompts, then one warm-up decode step
      if (auto out = r.Forward(batch); !out.ok()) {
        return Fail("walsh-bench", 3, std::string(out.status().message()));
      }
      for (SequenceInput& in : batch) in.tokens = {static_cast<int32_t>(gen() % vocab)};
    }
    op_profile.Reset();
    const auto t = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < gen_tokens; ++k) {
      for (SequenceInput& in : batch) in.tokens = {static_cast<int32_t>(gen() % vocab)};
      if (auto out = r.Forward(batch); !out.ok()) {
        return Fail("walsh-bench", 3, std::string(out.status().message()));
      }
    }
    const double s = Since(t);
    row("tg" + std::to_string(gen_tokens), b, gen_tokens * b / s, s / gen_tokens,
        gen_tokens * static_cast<double>(step_bytes) / s);
    profiles.push_back({"tg" + std::to_string(gen_tokens) + " batch " + std::to_string(b), s,
                        gen_tokens, op_profile.Entries()});
    for (const SequenceInput& in : batch) (void)r.RemoveSequence(in.id);
  }
  for (int64_t b : speculate > 0 ? batch_sizes : std::vector<int64_t>{}) {
    // sd: b sequences, each step verifying `speculate` oracle drafts (oracle_speculation.h).
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < b; ++i) prompts.push_back(random_tokens(16));
    absl::StatusOr<OracleSpeculation> sd = RunOracleSpeculation(r, prompts, speculate, gen_tokens);
    if (!sd.ok()) return Fail("walsh-bench", 3, std::string(sd.status().message()));
    row("sd" + std::to_string(speculate), b, sd->tokens / sd->seconds, sd->seconds / sd->steps,
        sd->steps * static_cast<double>(step_bytes) / sd->seconds);
  }
  // The page size the weights were read through, measured after the run touched them all: the
  // yardstick read small pages beside a mapping whose page cache held some huge.
  const GgufFile& gguf = e.model().gguf();
  if (absl::StatusOr<HugePageShare> share = HugePageShareOf(gguf.bytes(), gguf.file_size());
      share.ok()) {
    std::printf(
        "weights in huge pages after the run: %.2f of %.2f GB resident (%.0f%%), from "
        "/proc/self/smaps\n",
        share->huge_page_bytes / 1e9, share->resident_bytes / 1e9,
        share->resident_bytes > 0 ? 100.0 * share->huge_page_bytes / share->resident_bytes : 0.0);
    doc["weight_resident_bytes"] = share->resident_bytes;
    doc["weight_hugepage_bytes"] = share->huge_page_bytes;
  }
  if (profile) PrintProfiles(profiles, &doc);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << doc.dump(2) << "\n";
    if (!out) return Fail("walsh-bench", 3, "cannot write " + json_path);
  }
  return 0;
}

int Run(int argc, char** argv) {
  const std::string command = argc >= 2 ? argv[1] : "";
  if (command == "decode") return Decode(argc - 1, argv + 1);
  if (command == "constraint") return ConstraintBenchMain(argc - 1, argv + 1);
  if (command == "vision") return VisionBenchMain(argc - 1, argv + 1);
#ifdef WALSH_ENGINE_ONLY
  if (command == "serve")
    return Fail("walsh-bench", 2, "walsh-bench serve is not in the engine-only build");
#else
  if (command == "serve") return ServeBenchMain(argc - 1, argv + 1);
#endif
  return Fail("walsh-bench", 2,
              "usage: walsh-bench decode --model FILE ... | walsh-bench constraint --model FILE "
              "... | walsh-bench vision [--device cpu|cuda] ... | walsh-bench serve --target "
              "ADDR ...");
}

}  // namespace
}  // namespace walsh

int main(int argc, char** argv) { return walsh::Run(argc, argv); }
