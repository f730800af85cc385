// walsh-run's flags and their checks.
#ifndef WALSH_TOOLS_RUN_RUN_OPTIONS_H_
#define WALSH_TOOLS_RUN_RUN_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/cli_flags.h"
#include "common/weights_memory.h"
#include "worker/engine/engine_options.h"

namespace walsh {

struct RunOptions {
  std::string model;
  // Exactly one of the three prompts.
  std::string prompt, messages, tokens;
  bool thinking = false;
  // Images with --prompt: a vision projector and comma-separated image files (docs/vision.md).
  std::string mmproj, images;

  int64_t max_tokens = 128;
  double temperature = 0.0, top_p = 1.0, min_p = 0.0;
  int64_t top_k = 0;
  double repetition_penalty = 1.0, presence_penalty = 0.0, frequency_penalty = 0.0;
  uint64_t seed = 0;
  std::string stop;  // '|'-separated
  bool ignore_eos = false;

  std::string output = "text";  // text | ids | json
  int64_t logprobs = 0;
  std::string logits_out;

  int64_t threads = 1, tp = 1, max_context = 0, prefill_chunk = 256;
  std::string device = "cpu", kv_cache_dtype = "fp16", weights_memory = "mmap";
  double gpu_memory_utilization = 0.9;
  bool no_activation_quant = false;
  bool mlock = false;

  void Register(FlagSet& flags);
  // INVALID_ARGUMENT naming the first flag out of range.
  absl::Status Validate() const;
  // Valid after Validate().
  Device ParsedDevice() const;
  WeightsMemory ParsedWeightsMemory() const;  // auto on a GPU is mmap
  KvCacheDtype ParsedKvCacheDtype() const;
};

}  // namespace walsh

#endif  // WALSH_TOOLS_RUN_RUN_OPTIONS_H_
