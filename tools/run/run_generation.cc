// RunGeneration: one prompt through the engine, as walsh-run does it.
#include "tools/run/run_generation.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "tools/run/run_images.h"
#include "tools/run/token_printer.h"
#include "worker/engine/chat_format.h"
#include "worker/engine/engine.h"
#include "worker/engine/generation.h"
#include "worker/engine/solo_runner.h"
#include "worker/model/tokenizer.h"

namespace walsh {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

absl::Status ModelError(absl::string_view what) { return absl::FailedPreconditionError(what); }
absl::Status RunError(const absl::Status& s) { return absl::AbortedError(s.message()); }

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

// The model's tokenizer; null when it has none and the run needs none (token ids in and out).
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFor(const GgufFile& gguf, const RunOptions& o) {
  auto tokenizer = Tokenizer::FromGguf(gguf);
  if (tokenizer.ok()) return std::move(*tokenizer);
  if (o.tokens.empty() || o.output == "text" || !o.stop.empty()) {
    return ModelError(absl::StrCat("this model has no usable tokenizer (",
                                   tokenizer.status().message(),
                                   "): use --tokens and --output ids|json"));
  }
  return nullptr;
}

absl::StatusOr<std::vector<int32_t>> PromptIds(const RunOptions& o, const Tokenizer* tokenizer) {
  std::vector<int32_t> ids;
  if (!o.tokens.empty()) {
    for (absl::string_view part : absl::StrSplit(o.tokens, ',')) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--tokens: \"", part, "\" is not a token id"));
      }
      ids.push_back(id);
    }
  } else if (!o.messages.empty()) {
    auto parsed = ParseChatMessagesJson(o.messages);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("--messages: ", parsed.status().message()));
    auto pieces = FormatChatMlPieces(*parsed, o.thinking);
    if (!pieces.ok())
      return absl::InvalidArgumentError(absl::StrCat("--messages: ", pieces.status().message()));
    ids = tokenizer->Encode(*pieces);
  } else {
    ids = tokenizer->Encode(o.prompt);
  }
  if (ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  return ids;
}

absl::StatusOr<std::unique_ptr<SoloRunner>> RunnerFor(ModelFile file, const RunOptions& o,
                                                      int64_t prompt_tokens) {
  auto bound = Model::Bind(std::move(file));
  if (!bound.ok()) return ModelError(bound.status().message());
  EngineOptions opts;
  opts.threads = static_cast<int>(o.threads);
  opts.max_context = o.max_context;
  CacheOptions caches;
  caches.state_slots = 1;
  caches.kv_pages = (prompt_tokens + o.max_tokens) / caches.page_size + 2;
  opts.quantize_activations = !o.no_activation_quant;
  opts.tp = static_cast<int>(o.tp);
  opts.device = o.ParsedDevice();
  opts.gpu_memory_utilization = o.gpu_memory_utilization;
  opts.kv_cache_dtype = o.ParsedKvCacheDtype();
  auto runner = SoloRunner::Create(std::move(*bound), opts, caches);
  if (!runner.ok()) return ModelError(runner.status().message());
  return runner;
}

GenerationRequest RequestFor(const RunOptions& o, std::vector<int32_t> prompt,
                             const Tokenizer* tokenizer) {
  GenerationRequest request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = static_cast<float>(o.temperature);
  request.sampling.top_k = static_cast<int32_t>(o.top_k);
  request.sampling.top_p = static_cast<float>(o.top_p);
  request.sampling.min_p = static_cast<float>(o.min_p);
  request.sampling.repetition_penalty = static_cast<float>(o.repetition_penalty);
  request.sampling.presence_penalty = static_cast<float>(o.presence_penalty);
  request.sampling.frequency_penalty = static_cast<float>(o.frequency_penalty);
  request.sampling.seed = o.seed;
  request.sampling.logprobs = static_cast<int32_t>(o.logprobs);
  request.stop.max_tokens = o.max_tokens;
  request.stop.ignore_eos = o.ignore_eos;
  if (tokenizer != nullptr) request.stop.eos_ids = tokenizer->eos_ids();
  if (!o.stop.empty()) {
    for (absl::string_view s : absl::StrSplit(o.stop, '|'))
      request.stop.stop_strings.emplace_back(s);
  }
  return request;
}

// Feeds the prompt in chunks; `last` gets the logits after it, `logits_out` (if open) every
// position's.
// With images, `prompt` holds their keys (image_prompt.h) and every step their inputs.
absl::Status Prefill(SoloRunner& runner, SequenceId seq, const std::vector<int32_t>& prompt,
                     const PromptImages& images, int64_t chunk_size, std::FILE* logits_out,
                     std::vector<float>& last) {
  for (size_t i = 0; i < prompt.size(); i += chunk_size) {
    SequenceInput in{seq,
                     std::vector<int32_t>(prompt.begin() + i,
                                          prompt.begin() + std::min(prompt.size(), i + chunk_size)),
                     logits_out != nullptr};
    AttachImageInputs(images, static_cast<int64_t>(i), in);
    ASSIGN_OR_RETURN(ForwardResult out, runner.Forward({in}));
    if (logits_out != nullptr) {
      std::fwrite(out.logits.data(), sizeof(float), out.logits.size(), logits_out);
    }
    const float* row = out.RowLogits(out.rows.size() - 1);
    std::copy(row, row + out.vocab, last.begin());
  }
  return absl::OkStatus();
}

struct Decoded {
  FinishReason finish = FinishReason::kNone;
  std::string matched_stop;
  int64_t tokens = 0;
};

// Samples, prints and feeds back tokens until the generation ends or the context is full.
absl::StatusOr<Decoded> Decode(SoloRunner& runner, SequenceId seq, Generation& gen,
                               const PromptImages& images, std::vector<float>& last,
                               TokenPrinter& printer, bool no_tokens) {
  Decoded d;
  if (no_tokens) d.finish = FinishReason::kLength;
  const int64_t vocab = static_cast<int64_t>(last.size());
  while (d.finish == FinishReason::kNone) {
    ASSIGN_OR_RETURN(const GeneratedToken t, gen.Advance(last.data(), vocab));
    ++d.tokens;
    printer.Print(t);
    d.finish = t.finish;
    d.matched_stop = t.matched_stop;
    if (d.finish != FinishReason::kNone) break;
    SequenceInput in{seq, {t.id}};
    AttachImageInputs(images, gen.request().prompt.size() + d.tokens - 1, in);
    auto out = runner.Forward({in});
    if (!out.ok() && out.status().code() == absl::StatusCode::kOutOfRange) {
      d.finish = FinishReason::kLength;  // the context is full
      break;
    }
    if (!out.ok()) return out.status();
    std::copy(out->RowLogits(0), out->RowLogits(0) + vocab, last.begin());
  }
  return d;
}

// Closes the file when the run ends, however it ends.
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

absl::Status RunGeneration(const RunOptions& o) {
  const auto load_start = Clock::now();
  absl::StatusOr<ModelFile> file = LoadModelFile(o.model, o.ParsedWeightsMemory(), o.mlock);
  if (!file.ok()) return ModelError(absl::StrCat("refused: ", file.status().message()));
  Preload(*file->gguf, isatty(STDERR_FILENO) || file->gguf->file_size() > (size_t{1} << 30));
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, TokenizerFor(*file->gguf, o));
  PromptImages images;
  std::vector<int32_t> prompt;
  if (o.images.empty()) {
    ASSIGN_OR_RETURN(prompt, PromptIds(o, tokenizer.get()));
  } else {
    ASSIGN_OR_RETURN(prompt, ImagePromptIds(o, *tokenizer, file->config.embedding_length, &images));
  }
  const int64_t vocab = file->config.vocab_size;
  ASSIGN_OR_RETURN(std::unique_ptr<SoloRunner> runner,
                   RunnerFor(std::move(*file), o, static_cast<int64_t>(prompt.size())));
  const WeightsMemoryChoice& placed = runner->model().gguf().memory();
  std::fprintf(stderr,
               "walsh-run: %s loaded in %.2f s (weights: %s, %s), %s kernels, %lld threads, "
               "prompt %zu tokens\n",
               o.model.c_str(), Seconds(load_start), WeightsMemoryName(placed.memory),
               placed.reason.c_str(), runner->engine().kernels().c_str(),
               static_cast<long long>(o.threads), prompt.size());

  Generation gen(tokenizer.get(), RequestFor(o, prompt, tokenizer.get()));
  std::unique_ptr<std::FILE, FileCloser> logits_out;
  if (!o.logits_out.empty()) {
    logits_out.reset(std::fopen(o.logits_out.c_str(), "wb"));
    if (!logits_out)
      return absl::InvalidArgumentError("--logits-out: cannot create " + o.logits_out);
  }
  auto seq = runner->AddSequence();
  if (!seq.ok()) return RunError(seq.status());

  const auto prefill_start = Clock::now();
  std::vector<float> last(vocab);
  if (absl::Status s = Prefill(*runner, *seq, KeyImageTokens(prompt, images), images,
                               o.prefill_chunk, logits_out.get(), last);
      !s.ok()) {
    return RunError(s);
  }
  if (logits_out && std::fclose(logits_out.release()) != 0) {
    return RunError(absl::DataLossError("--logits-out: write failed"));
  }
  const double prefill_s = Seconds(prefill_start);

  const auto decode_start = Clock::now();
  TokenPrinter printer(o.output, o.logprobs > 0);
  absl::StatusOr<Decoded> decoded =
      Decode(*runner, *seq, gen, images, last, printer, o.max_tokens == 0);
  if (!decoded.ok()) return RunError(decoded.status());
  const double decode_s = Seconds(decode_start);
  printer.Finish(decoded->finish, decoded->matched_stop, prompt.size(), decoded->tokens);
  std::fprintf(stderr,
               "walsh-run: prompt %zu tokens in %.3f s (%.1f tok/s), generated %lld tokens in "
               "%.3f s (%.1f tok/s), finish: %s\n",
               prompt.size(), prefill_s, prompt.size() / std::max(prefill_s, 1e-9),
               static_cast<long long>(decoded->tokens), decode_s,
               decoded->tokens / std::max(decode_s, 1e-9), FinishReasonName(decoded->finish));
  return absl::OkStatus();
}

}  // namespace walsh
