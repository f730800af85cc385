// Turns logits into the next token. Randomness comes from a counter-based generator keyed by
// (seed, output index), so a request with a seed draws the same tokens whatever batch it runs
// in and whichever worker resumes it.
#ifndef WALSH_WORKER_ENGINE_SAMPLER_H_
#define WALSH_WORKER_ENGINE_SAMPLER_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace walsh {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keeps p >= min_p * p_max
  float repetition_penalty = 1.0f;  // over prompt and output tokens (divides positive logits)
  float presence_penalty = 0.0f;    // over output tokens, OpenAI semantics
  float frequency_penalty = 0.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits first
  uint64_t seed = 0;
  int32_t logprobs = 0;  // top-N log-probabilities to report per token
};

struct SampledToken {
  int32_t id = 0;
  float logprob = 0;  // of the chosen token under the model's (unprocessed) distribution
  std::vector<std::pair<int32_t, float>> top;  // top-N (id, logprob), most likely first
};

// A uniform draw in [0, 1) from (seed, output index) alone.
double CounterUniform(uint64_t seed, int64_t output_index);

// `output_index` is the position of the token being drawn among the request's outputs.
// `allowed` (optional, one bit per token) restricts the draw to its set tokens, which must not
// be empty; logprobs stay those of the model's own distribution.
SampledToken Sample(const float* logits, int64_t vocab, const SamplingParams& params,
                    const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                    int64_t output_index, const std::vector<uint64_t>* allowed = nullptr);

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_SAMPLER_H_
