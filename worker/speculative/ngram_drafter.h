// Prompt-lookup drafting (speculative decoding with no draft model): the longest suffix of a
// sequence's tokens, from `max_match` down to `min_match` tokens, that occurred earlier in
// them proposes the tokens that followed its most recent earlier occurrence. Text that repeats
// its input (code edits, quotes, summaries) drafts well; anything else drafts nothing, and the
// step is a plain decode step. Pure: the verification that keeps the output exact is the
// engine's (SequenceRunner::Rollback).
#ifndef WALSH_WORKER_SPECULATIVE_NGRAM_DRAFTER_H_
#define WALSH_WORKER_SPECULATIVE_NGRAM_DRAFTER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/speculative/drafter.h"

namespace walsh {

struct NgramDraftOptions {
  int64_t min_match = 1, max_match = 4;  // suffix lengths tried, longest first
  int64_t max_tokens = 3;                // the most tokens drafted
};

// Refuses a min_match below 1, a max_match below min_match, or max_tokens below 1, naming the
// option.
absl::Status ValidateNgramDraftOptions(const NgramDraftOptions& options);

// Up to max_tokens tokens drafted to follow `tokens`; empty when no suffix recurs.
std::vector<int32_t> DraftNgram(absl::Span<const int32_t> tokens, const NgramDraftOptions& options);

// DraftNgram as a Drafter: each request drafts at most the lesser of its own max_tokens and
// options.max_tokens. Keeps nothing between steps.
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const NgramDraftOptions& options) : options_(options) {}
  std::vector<std::vector<int32_t>> Draft(absl::Span<const DraftRequest> requests) override;
  void Forget(uint64_t) override {}

 private:
  NgramDraftOptions options_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_SPECULATIVE_NGRAM_DRAFTER_H_
