// walsh-run: generate from a model on the CPU, streaming text to stdout.
//   walsh-run --model FILE (--prompt TEXT | --messages JSON | --tokens ID,ID,...) [options]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli_flags.h"
#include "nlohmann/json.hpp"
#include "worker/engine/chat_format.h"
#include "worker/engine/engine.h"
#include "worker/engine/generation.h"
#include "worker/model/tokenizer.h"

namespace walsh {
namespace {

enum ExitCode { kOk = 0, kModelError = 1, kUsage = 2, kRuntimeError = 3 };

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "walsh-run: %s\n", message.c_str());
  return code;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Reads every page of the weights once so the first token is not paid for by page faults,
// with a progress indicator for large files.
void Preload(const GgufFile& g, bool show) {
  const size_t total = g.file_size();
  volatile uint8_t sink = 0;
  int last = -1;
  for (const GgufTensorInfo& t : g.tensors()) {
    for (uint64_t off = 0; off < t.n_bytes; off += 4096) sink = sink + t.data[off];
    const int pct = static_cast<int>(100.0 * static_cast<double>(t.data - g.tensors()[0].data) /
                                     static_cast<double>(total));
    if (show && pct / 5 != last) {
      last = pct / 5;
      std::fprintf(stderr, "\rwalsh-run: loading weights %3d%%", pct);
    }
  }
  if (show) std::fprintf(stderr, "\rwalsh-run: loading weights 100%%\n");
}

std::string JsonEscape(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int Run(int argc, char** argv) {
  std::string model_path, prompt, messages, tokens_arg, output = "text", logits_out, stop_arg;
  int64_t max_tokens = 128, threads = 1, top_k = 0, logprobs = 0, max_context = 0,
          prefill_chunk = 256;
  double temperature = 0.0, top_p = 1.0, min_p = 0.0, repetition_penalty = 1.0;
  double presence_penalty = 0.0, frequency_penalty = 0.0;
  uint64_t seed = 0;
  bool ignore_eos = false, thinking = false, no_activation_quant = false;
  int64_t tp = 1;
  std::string device = "cpu", kv_cache_dtype = "fp16";
  double gpu_memory_utilization = 0.9;
  FlagSet flags(
      "walsh-run --model FILE (--prompt TEXT | --messages JSON | --tokens ID,ID,...) "
      "[--max-tokens N] [--temperature T] [--seed S] [--ignore-eos] [--threads N] "
      "[--output text|ids|json] [--logits-out FILE]");
  flags.String("model", &model_path, "GGUF model file (required)");
  flags.String("prompt", &prompt, "prompt text, used as is");
  flags.String(
      "messages", &messages,
      "chat messages as JSON [{\"role\": \"user\", \"content\": \"...\"}], ChatML-formatted");
  flags.String("tokens", &tokens_arg, "prompt as comma-separated token ids");
  flags.Int("max-tokens", &max_tokens, "tokens to generate at most");
  flags.Double("temperature", &temperature, "0 is greedy");
  flags.Int("top-k", &top_k, "keep the k most likely tokens (0: off)");
  flags.Double("top-p", &top_p, "nucleus sampling mass (1: off)");
  flags.Double("min-p", &min_p, "drop tokens below min-p x the top probability (0: off)");
  flags.Double("repetition-penalty", &repetition_penalty, "1: off");
  flags.Double("presence-penalty", &presence_penalty, "0: off");
  flags.Double("frequency-penalty", &frequency_penalty, "0: off");
  flags.Uint64("seed", &seed, "sampling seed; the same seed gives the same tokens");
  flags.String("stop", &stop_arg, "stop strings, separated by '|' (not emitted)");
  flags.Bool("ignore-eos", &ignore_eos, "keep generating past end-of-sequence tokens");
  flags.Bool("thinking", &thinking, "with --messages: leave thinking on (no empty <think> block)");
  flags.Int("logprobs", &logprobs, "with --output json: top-N log-probabilities per token");
  flags.Int("threads", &threads, "CPU threads");
  flags.Int("tp", &tp, "tensor-parallel ranks: 1, 2, 4 or 8 in-process CPU ranks");
  flags.String("device", &device, "cpu or cuda (the first visible GPU)");
  flags.Double("gpu-memory-utilization", &gpu_memory_utilization,
               "with --device cuda: the share of the GPU's memory to use, (0, 1]");
  flags.String("kv-cache-dtype", &kv_cache_dtype, "KV page storage: fp16, q8 or q4");
  flags.Int("max-context", &max_context, "context limit (0: the model's)");
  flags.Int("prefill-chunk", &prefill_chunk, "prompt tokens per forward step");
  flags.String("output", &output, "text | ids | json");
  flags.String("logits-out", &logits_out,
               "write the logits of every prompt position (fp32 little-endian, vocab per row)");
  flags.Bool("no-activation-quant", &no_activation_quant,
             "debug: fp32 activations instead of int8 in the ternary dot products");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    return Fail(kUsage, std::string(s.message()) + "\n" + flags.Help());
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return kOk;
  }
  if (model_path.empty()) return Fail(kUsage, "--model FILE is required (see --help)");
  const int inputs = !prompt.empty() + !messages.empty() + !tokens_arg.empty();
  if (inputs != 1) return Fail(kUsage, "give exactly one of --prompt, --messages, --tokens");
  if (output != "text" && output != "ids" && output != "json") {
    return Fail(kUsage, "--output must be text, ids or json");
  }
  Device dev;
  if (!ParseDevice(device, &dev)) return Fail(kUsage, "--device must be cpu or cuda");
  KvCacheDtype kv_dtype;
  if (!ParseKvCacheDtype(kv_cache_dtype, &kv_dtype)) {
    return Fail(kUsage, "--kv-cache-dtype must be fp16, q8 or q4");
  }
  if (gpu_memory_utilization <= 0 || gpu_memory_utilization > 1) {
    return Fail(kUsage, "--gpu-memory-utilization must be in (0, 1]");
  }
  if (tp != 1 && tp != 2 && tp != 4 && tp != 8) return Fail(kUsage, "--tp must be 1, 2, 4 or 8");
  if (max_tokens < 0 || threads < 1 || prefill_chunk < 1) {
    return Fail(kUsage, "--max-tokens must be >= 0, --threads and --prefill-chunk >= 1");
  }
  if (temperature < 0 || top_p <= 0 || top_p > 1 || min_p < 0 || min_p > 1) {
    return Fail(kUsage, "--temperature must be >= 0, --top-p in (0, 1], --min-p in [0, 1]");
  }

  const auto load_start = std::chrono::steady_clock::now();
  absl::StatusOr<ModelFile> file = LoadModelFile(model_path);
  if (!file.ok()) return Fail(kModelError, "refused: " + std::string(file.status().message()));
  Preload(*file->gguf, isatty(STDERR_FILENO) || file->gguf->file_size() > (size_t{1} << 30));
  std::unique_ptr<Tokenizer> tokenizer;
  absl::Status tok_status = absl::OkStatus();
  if (auto t = Tokenizer::FromGguf(*file->gguf); t.ok()) {
    tokenizer = std::move(*t);
  } else {
    tok_status = t.status();
  }
  if (!tokenizer && (tokens_arg.empty() || output == "text" || !stop_arg.empty())) {
    return Fail(kModelError, "this model has no usable tokenizer (" +
                                 std::string(tok_status.message()) +
                                 "): use --tokens and --output ids|json");
  }

  std::vector<int32_t> prompt_ids;
  if (!tokens_arg.empty()) {
    for (absl::string_view part : absl::StrSplit(tokens_arg, ',')) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id))
        return Fail(kUsage, "--tokens: \"" + std::string(part) + "\" is not a token id");
      prompt_ids.push_back(id);
    }
  } else if (!messages.empty()) {
    auto parsed = ParseChatMessagesJson(messages);
    if (!parsed.ok()) return Fail(kUsage, "--messages: " + std::string(parsed.status().message()));
    auto pieces = FormatChatMlPieces(*parsed, thinking);
    if (!pieces.ok()) return Fail(kUsage, "--messages: " + std::string(pieces.status().message()));
    prompt_ids = tokenizer->Encode(*pieces);
  } else {
    prompt_ids = tokenizer->Encode(prompt);
  }
  if (prompt_ids.empty()) return Fail(kUsage, "the prompt is empty");

  const int64_t vocab = file->config.vocab_size;
  auto bound = Model::Bind(std::move(*file));
  if (!bound.ok()) return Fail(kModelError, std::string(bound.status().message()));
  EngineOptions opts;
  opts.threads = static_cast<int>(threads);
  opts.max_context = max_context;
  opts.state_slots = 1;
  opts.kv_pages = (static_cast<int64_t>(prompt_ids.size()) + max_tokens) / opts.page_size + 2;
  opts.quantize_activations = !no_activation_quant;
  opts.tp = static_cast<int>(tp);
  opts.device = dev;
  opts.gpu_memory_utilization = gpu_memory_utilization;
  opts.kv_cache_dtype = kv_dtype;
  auto engine = Engine::Create(std::move(*bound), opts);
  if (!engine.ok()) return Fail(kModelError, std::string(engine.status().message()));
  const std::string kernels = (*engine)->kernels();
  std::fprintf(stderr,
               "walsh-run: %s loaded in %.2f s, %s kernels, %lld threads, prompt %zu tokens\n",
               model_path.c_str(), Seconds(load_start), kernels.c_str(),
               static_cast<long long>(threads), prompt_ids.size());

  GenerationRequest request;
  request.prompt = prompt_ids;
  request.sampling.temperature = static_cast<float>(temperature);
  request.sampling.top_k = static_cast<int32_t>(top_k);
  request.sampling.top_p = static_cast<float>(top_p);
  request.sampling.min_p = static_cast<float>(min_p);
  request.sampling.repetition_penalty = static_cast<float>(repetition_penalty);
  request.sampling.presence_penalty = static_cast<float>(presence_penalty);
  request.sampling.frequency_penalty = static_cast<float>(frequency_penalty);
  request.sampling.seed = seed;
  request.sampling.logprobs = static_cast<int32_t>(logprobs);
  request.stop.max_tokens = max_tokens;
  request.stop.ignore_eos = ignore_eos;
  if (tokenizer) request.stop.eos_ids = tokenizer->eos_ids();
  if (!stop_arg.empty()) {
    for (absl::string_view s : absl::StrSplit(stop_arg, '|'))
      request.stop.stop_strings.emplace_back(s);
  }
  Generation gen(tokenizer.get(), request);

  std::FILE* logits_file = nullptr;
  if (!logits_out.empty() && (logits_file = std::fopen(logits_out.c_str(), "wb")) == nullptr) {
    return Fail(kUsage, "--logits-out: cannot create " + logits_out);
  }
  auto seq = (*engine)->AddSequence();
  if (!seq.ok()) return Fail(kRuntimeError, std::string(seq.status().message()));

  const auto prefill_start = std::chrono::steady_clock::now();
  std::vector<float> last(vocab);
  for (size_t i = 0; i < prompt_ids.size(); i += prefill_chunk) {
    std::vector<int32_t> chunk(prompt_ids.begin() + i,
                               prompt_ids.begin() + std::min(prompt_ids.size(), i + prefill_chunk));
    auto out = (*engine)->Forward({{*seq, chunk, logits_file != nullptr}});
    if (!out.ok()) return Fail(kRuntimeError, std::string(out.status().message()));
    if (logits_file != nullptr) {
      std::fwrite(out->logits.data(), sizeof(float), out->logits.size(), logits_file);
    }
    std::copy(out->RowLogits(out->rows.size() - 1), out->RowLogits(out->rows.size() - 1) + vocab,
              last.begin());
  }
  if (logits_file != nullptr && std::fclose(logits_file) != 0) {
    return Fail(kRuntimeError, "--logits-out: write failed");
  }
  const double prefill_s = Seconds(prefill_start);

  const auto decode_start = std::chrono::steady_clock::now();
  FinishReason finish = max_tokens == 0 ? FinishReason::kLength : FinishReason::kNone;
  std::string matched;
  int64_t generated = 0;
  while (finish == FinishReason::kNone) {
    const GeneratedToken t = gen.Advance(last.data(), vocab);
    ++generated;
    if (output == "text") {
      std::fwrite(t.text.data(), 1, t.text.size(), stdout);
    } else if (output == "ids") {
      std::printf("%s%d", t.index ? "," : "", t.id);
    } else {
      std::string top;
      for (const auto& [id, lp] : t.top_logprobs) {
        top += (top.empty() ? "" : ",") + std::string("{\"id\":") + std::to_string(id) +
               ",\"logprob\":" + std::to_string(lp) + "}";
      }
      std::printf("{\"index\":%lld,\"id\":%d,\"text\":%s,\"logprob\":%g%s}\n",
                  static_cast<long long>(t.index), t.id, JsonEscape(t.text).c_str(), t.logprob,
                  logprobs > 0 ? (",\"top_logprobs\":[" + top + "]").c_str() : "");
    }
    std::fflush(stdout);
    finish = t.finish;
    matched = t.matched_stop;
    if (finish != FinishReason::kNone) break;
    auto out = (*engine)->Forward({{*seq, {t.id}}});
    if (!out.ok()) {
      if (out.status().code() == absl::StatusCode::kOutOfRange) {
        finish = FinishReason::kLength;  // the context is full
        break;
      }
      return Fail(kRuntimeError, std::string(out.status().message()));
    }
    std::copy(out->RowLogits(0), out->RowLogits(0) + vocab, last.begin());
  }
  const double decode_s = Seconds(decode_start);
  if (output == "json") {
    std::printf(
        "{\"finish_reason\":\"%s\",\"matched_stop\":%s,\"prompt_tokens\":%zu,"
        "\"completion_tokens\":%lld}\n",
        FinishReasonName(finish), JsonEscape(matched).c_str(), prompt_ids.size(),
        static_cast<long long>(generated));
  } else {
    std::printf("\n");
  }
  std::fprintf(stderr,
               "walsh-run: prompt %zu tokens in %.3f s (%.1f tok/s), generated %lld tokens in "
               "%.3f s (%.1f tok/s), finish: %s\n",
               prompt_ids.size(), prefill_s, prompt_ids.size() / std::max(prefill_s, 1e-9),
               static_cast<long long>(generated), decode_s, generated / std::max(decode_s, 1e-9),
               FinishReasonName(finish));
  return kOk;
}

}  // namespace
}  // namespace walsh

int main(int argc, char** argv) { return walsh::Run(argc, argv); }
