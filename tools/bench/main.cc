// walsh-bench engine: the engine's speed on one machine, in one run — time to first token for a
// long prompt, and decode tokens per second with 1 and more sequences stepping together — with
// the weight bytes each decode step reads, so a reader can set tokens/s against the memory
// bandwidth measured in the same run. Any device (--device cpu|cuda).
//
//   walsh-bench --model M.gguf --device cuda --batch 1,16 --prompt-tokens 2048 --decode-tokens 64
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli_flags.h"
#include "worker/engine/engine.h"
#include "worker/model/ggml_types.h"

namespace walsh {
namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Bytes of packed projection weights one decode step reads: every ternary matrix once, and one
// embedding row per token (negligible, not counted).
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

int Run(int argc, char** argv) {
  std::string model_path, device = "cpu", batches = "1";
  int64_t threads = 1, prompt_tokens = 512, decode_tokens = 32, prefill_chunk = 512, tp = 1;
  double gpu_memory_utilization = 0.9;
  FlagSet flags(
      "walsh-bench --model FILE [--device cpu|cuda] [--batch 1,16] [--prompt-tokens N] "
      "[--decode-tokens N] [--threads N]");
  flags.String("model", &model_path, "GGUF model file (required)");
  flags.String("device", &device, "cpu or cuda");
  flags.Double("gpu-memory-utilization", &gpu_memory_utilization, "with --device cuda");
  flags.String("batch", &batches, "decode batch sizes, comma-separated");
  flags.Int("prompt-tokens", &prompt_tokens, "prompt length for the time to first token");
  flags.Int("prefill-chunk", &prefill_chunk, "prompt tokens per forward step");
  flags.Int("decode-tokens", &decode_tokens, "decode steps per batch size");
  flags.Int("threads", &threads, "CPU threads");
  flags.Int("tp", &tp, "tensor-parallel CPU ranks (1, 2, 4 or 8)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "walsh-bench: %s\n%s", std::string(s.message()).c_str(),
                 flags.Help().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  Device dev;
  std::vector<int64_t> batch_sizes;
  for (absl::string_view b : absl::StrSplit(batches, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(b, &v) || v < 1) {
      std::fprintf(stderr, "walsh-bench: --batch: \"%s\" is not a batch size\n",
                   std::string(b).c_str());
      return 2;
    }
    batch_sizes.push_back(v);
  }
  if (model_path.empty() || !ParseDevice(device, &dev) || prompt_tokens < 1 || decode_tokens < 1 ||
      prefill_chunk < 1 || threads < 1) {
    std::fprintf(stderr, "walsh-bench: bad arguments\n%s", flags.Help().c_str());
    return 2;
  }
  auto file = LoadModelFile(model_path);
  if (!file.ok()) {
    std::fprintf(stderr, "walsh-bench: refused: %s\n",
                 std::string(file.status().message()).c_str());
    return 1;
  }
  auto bound = Model::Bind(std::move(*file));
  if (!bound.ok()) {
    std::fprintf(stderr, "walsh-bench: %s\n", std::string(bound.status().message()).c_str());
    return 1;
  }
  int64_t max_batch = 1;
  for (int64_t b : batch_sizes) max_batch = std::max(max_batch, b);
  EngineOptions opts;
  opts.device = dev;
  opts.gpu_memory_utilization = gpu_memory_utilization;
  opts.threads = static_cast<int>(threads);
  opts.tp = static_cast<int>(tp);
  opts.state_slots = max_batch;
  opts.kv_pages =
      (max_batch * (16 + decode_tokens) + prompt_tokens) / opts.page_size + 2 * max_batch + 2;
  const auto load = std::chrono::steady_clock::now();
  auto engine = Engine::Create(std::move(*bound), opts);
  if (!engine.ok()) {
    std::fprintf(stderr, "walsh-bench: %s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  Engine& e = **engine;
  const double load_s = Since(load);
  const int64_t vocab = e.model().config().vocab_size;
  const int64_t step_bytes = ProjectionBytes(e.model());
  std::mt19937 gen(1);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = static_cast<int32_t>(gen() % vocab);
    return ids;
  };
  std::printf(
      "model %s, device %s (%s kernels), tp %lld, load %.2f s, %.3f GB of projections per step\n",
      model_path.c_str(), device.c_str(), e.kernels().c_str(), static_cast<long long>(tp), load_s,
      step_bytes / 1e9);

  {  // Time to first token: the whole prompt, in chunks, up to its first logits.
    auto seq = e.AddSequence();
    const std::vector<int32_t> prompt = random_tokens(prompt_tokens);
    const auto t = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < prompt_tokens; i += prefill_chunk) {
      std::vector<int32_t> part(prompt.begin() + i,
                                prompt.begin() + std::min(prompt_tokens, i + prefill_chunk));
      if (auto out = e.Forward({{*seq, part}}); !out.ok()) {
        std::fprintf(stderr, "walsh-bench: %s\n", std::string(out.status().message()).c_str());
        return 3;
      }
    }
    const double s = Since(t);
    std::printf("prefill   %6lld tokens  ttft %8.3f s  %10.1f tokens/s\n",
                static_cast<long long>(prompt_tokens), s, prompt_tokens / s);
    (void)e.RemoveSequence(*seq);
  }
  for (int64_t b : batch_sizes) {
    std::vector<SequenceInput> batch;
    for (int64_t i = 0; i < b; ++i) batch.push_back({*e.AddSequence(), random_tokens(16)});
    if (auto out = e.Forward(batch); !out.ok()) {
      std::fprintf(stderr, "walsh-bench: %s\n", std::string(out.status().message()).c_str());
      return 3;
    }
    for (SequenceInput& in : batch) in.tokens = {static_cast<int32_t>(gen() % vocab)};
    (void)e.Forward(batch);  // one warm-up step
    const auto t = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < decode_tokens; ++k) {
      for (SequenceInput& in : batch) in.tokens = {static_cast<int32_t>(gen() % vocab)};
      if (auto out = e.Forward(batch); !out.ok()) {
        std::fprintf(stderr, "walsh-bench: %s\n", std::string(out.status().message()).c_str());
        return 3;
      }
    }
    const double s = Since(t);
    std::printf("decode    batch %3lld  %8.2f steps/s  %10.1f tokens/s  weights read %7.1f GB/s\n",
                static_cast<long long>(b), decode_tokens / s, decode_tokens * b / s,
                decode_tokens * static_cast<double>(step_bytes) / s / 1e9);
    for (const SequenceInput& in : batch) (void)e.RemoveSequence(in.id);
  }
  return 0;
}

}  // namespace
}  // namespace walsh

int main(int argc, char** argv) { return walsh::Run(argc, argv); }
