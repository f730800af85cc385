// The ranges a request's fields are accepted in, written once: the OpenAI face's parser, the
// worker's validation of a GenerateRequest and the flags that set the same values (walsh-run's
// sampling, the worker's --num-speculative-tokens, walsh-bench's --speculate) all read them
// here (docs/api.md lists them).
#ifndef WALSH_COMMON_REQUEST_RANGES_H_
#define WALSH_COMMON_REQUEST_RANGES_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace walsh {

template <typename T>
struct ValueRange {
  T lo, hi;
  bool lo_open = false;  // (lo, hi] rather than [lo, hi]
  // False for NaN.
  constexpr bool Contains(T v) const { return (lo_open ? v > lo : v >= lo) && v <= hi; }
  // "[0, 2]", "(0, 10]": as refusals print it.
  std::string ToString() const { return absl::StrCat(lo_open ? "(" : "[", lo, ", ", hi, "]"); }
};

namespace request_ranges {

// Sampling (v1::SamplingParams; the OpenAI face's fields of the same names).
inline constexpr ValueRange<double> kTemperature{0, 100};
inline constexpr ValueRange<double> kOpenAiTemperature{0, 2};  // OpenAI's documented range
inline constexpr ValueRange<double> kTopP{0, 1, /*lo_open=*/true};
inline constexpr ValueRange<double> kMinP{0, 1};
inline constexpr ValueRange<double> kRepetitionPenalty{0, 10, /*lo_open=*/true};  // 1: off
inline constexpr ValueRange<double> kPresencePenalty{-2, 2};
inline constexpr ValueRange<double> kFrequencyPenalty{-2, 2};
inline constexpr ValueRange<double> kLogitBias{-100, 100};
inline constexpr ValueRange<int64_t> kLogprobs{0, 20};  // top-N log-probabilities per token

// Speculative decoding: a request may ask for 0 (none) up to the most a worker drafts; the
// worker's --num-speculative-tokens is at least 1.
inline constexpr int64_t kMaxSpeculativeTokens = 16;
inline constexpr ValueRange<int64_t> kNumSpeculativeTokens{0, kMaxSpeculativeTokens};

}  // namespace request_ranges
}  // namespace walsh

#endif  // WALSH_COMMON_REQUEST_RANGES_H_
