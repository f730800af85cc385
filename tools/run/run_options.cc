// RunOptions: walsh-run's flags and their checks.
#include "tools/run/run_options.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace walsh {

void RunOptions::Register(FlagSet& flags) {
  flags.String("model", &model, "GGUF model file (required)");
  flags.String("prompt", &prompt, "prompt text, used as is");
  flags.String(
      "messages", &messages,
      "chat messages as JSON [{\"role\": \"user\", \"content\": \"...\"}], ChatML-formatted");
  flags.String("tokens", &tokens, "prompt as comma-separated token ids");
  flags.String("mmproj", &mmproj, "the model's vision projector (an mmproj GGUF), for --image");
  flags.String("image", &images,
               "with --mmproj and --prompt: image files (PNG, JPEG, WebP), comma-separated; each "
               "takes the place of the next <__image__> in --prompt, and those without one go "
               "before it");
  flags.Int("max-tokens", &max_tokens, "tokens to generate at most");
  flags.Double("temperature", &temperature, "0 is greedy");
  flags.Int("top-k", &top_k, "keep the k most likely tokens (0: off)");
  flags.Double("top-p", &top_p, "nucleus sampling mass (1: off)");
  flags.Double("min-p", &min_p, "drop tokens below min-p x the top probability (0: off)");
  flags.Double("repetition-penalty", &repetition_penalty, "1: off");
  flags.Double("presence-penalty", &presence_penalty, "0: off");
  flags.Double("frequency-penalty", &frequency_penalty, "0: off");
  flags.Uint64("seed", &seed, "sampling seed; the same seed gives the same tokens");
  flags.String("stop", &stop, "stop strings, separated by '|' (not emitted)");
  flags.Bool("ignore-eos", &ignore_eos, "keep generating past end-of-sequence tokens");
  flags.Bool("thinking", &thinking, "with --messages: leave thinking on (no empty <think> block)");
  flags.Int("logprobs", &logprobs, "with --output json: top-N log-probabilities per token");
  flags.Int("threads", &threads, "CPU threads");
  flags.Int("tp", &tp, "tensor-parallel ranks: 1, 2, 4 or 8 in-process CPU ranks");
  flags.String("device", &device, "cpu or cuda (the first visible GPU)");
  flags.String("weights-memory", &weights_memory, kWeightsMemoryHelp);
  flags.Bool("mlock", &mlock, kMlockHelp);
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
}

absl::Status RunOptions::Validate() const {
  if (model.empty()) return absl::InvalidArgumentError("--model FILE is required (see --help)");
  if (!prompt.empty() + !messages.empty() + !tokens.empty() != 1) {
    return absl::InvalidArgumentError("give exactly one of --prompt, --messages, --tokens");
  }
  if (!images.empty() && (mmproj.empty() || prompt.empty())) {
    return absl::InvalidArgumentError("--image needs --mmproj and --prompt");
  }
  if (!mmproj.empty() && images.empty()) {
    return absl::InvalidArgumentError("--mmproj is for --image; give the images");
  }
  if (!mmproj.empty() && device != "cpu") {
    return absl::InvalidArgumentError(
        "--mmproj needs --device cpu: the CUDA backend's image inputs have not yet run on a GPU");
  }
  if (output != "text" && output != "ids" && output != "json") {
    return absl::InvalidArgumentError("--output must be text, ids or json");
  }
  Device parsed_device;
  if (!ParseDevice(device, &parsed_device)) {
    return absl::InvalidArgumentError("--device must be cpu or cuda");
  }
  KvCacheDtype parsed_dtype;
  if (!ParseKvCacheDtype(kv_cache_dtype, &parsed_dtype)) {
    return absl::InvalidArgumentError("--kv-cache-dtype must be fp16, q8 or q4");
  }
  WeightsMemory memory;
  if (!ParseWeightsMemory(weights_memory, &memory)) {
    return absl::InvalidArgumentError(absl::StrCat("--weights-memory must be ", kWeightsMemoryNames,
                                                   " (got ", weights_memory, ")"));
  }
  if (!WeightsMemoryFitsDevice(memory, parsed_device == Device::kCuda)) {
    return absl::InvalidArgumentError(kHugePagesOnGpuError);
  }
  if (mlock && parsed_device == Device::kCuda) return absl::InvalidArgumentError(kMlockOnGpuError);
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1)) {
    return absl::InvalidArgumentError("--gpu-memory-utilization must be in (0, 1]");
  }
  if (tp != 1 && tp != 2 && tp != 4 && tp != 8) {
    return absl::InvalidArgumentError("--tp must be 1, 2, 4 or 8");
  }
  if (absl::Status s = CheckDeviceTp(parsed_device, tp); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  RETURN_IF_ERROR(FlagAtLeast("max-tokens", max_tokens, 0));
  RETURN_IF_ERROR(FlagAtLeast("threads", threads, 1));
  RETURN_IF_ERROR(FlagAtLeast("prefill-chunk", prefill_chunk, 1));
  RETURN_IF_ERROR(FlagAtLeast("max-context", max_context, 0));
  RETURN_IF_ERROR(FlagAtLeast("top-k", top_k, 0));
  // The ranges a request's fields have (common/request_ranges.h).
  RETURN_IF_ERROR(FlagInRange("logprobs", logprobs, request_ranges::kLogprobs));
  RETURN_IF_ERROR(FlagInRange("temperature", temperature, request_ranges::kTemperature));
  RETURN_IF_ERROR(FlagInRange("top-p", top_p, request_ranges::kTopP));
  RETURN_IF_ERROR(FlagInRange("min-p", min_p, request_ranges::kMinP));
  RETURN_IF_ERROR(
      FlagInRange("repetition-penalty", repetition_penalty, request_ranges::kRepetitionPenalty));
  RETURN_IF_ERROR(
      FlagInRange("presence-penalty", presence_penalty, request_ranges::kPresencePenalty));
  RETURN_IF_ERROR(
      FlagInRange("frequency-penalty", frequency_penalty, request_ranges::kFrequencyPenalty));
  return absl::OkStatus();
}

WeightsMemory RunOptions::ParsedWeightsMemory() const {
  WeightsMemory parsed = WeightsMemory::kAuto;
  ParseWeightsMemory(weights_memory, &parsed);
  return WeightsMemoryFor(parsed, ParsedDevice() == Device::kCuda);
}

Device RunOptions::ParsedDevice() const {
  Device parsed = Device::kCpu;
  ParseDevice(device, &parsed);
  return parsed;
}

KvCacheDtype RunOptions::ParsedKvCacheDtype() const {
  KvCacheDtype parsed = KvCacheDtype::kFp16;
  ParseKvCacheDtype(kv_cache_dtype, &parsed);
  return parsed;
}

}  // namespace walsh
