// The scheduler's speculative step, apart from the scheduler (docs/speculative_decoding.md):
// what a drafter's guesses may be, how drafts share a step's token budget, and how a verified
// member samples its rows. A drafted token is kept only when the target's own sample at that
// position equals it, so verification never changes an output, only how many steps it takes.
#ifndef WALSH_WORKER_SPECULATIVE_VERIFICATION_H_
#define WALSH_WORKER_SPECULATIVE_VERIFICATION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/engine/generation.h"

namespace walsh {

// A drafter's guess as a step may verify it: cut at its first token outside the vocabulary (a
// guess never fails a step) and at the `max_tokens` asked for.
std::vector<int32_t> TrimDraft(std::vector<int32_t> proposed, int64_t vocab, int64_t max_tokens);

// Every decode's own token comes first: the drafts share what `budget` leaves after them, in
// order, each cut to its share. Returns how many drafts each candidate keeps.
std::vector<int64_t> ShareDraftBudget(int64_t budget, const std::vector<bool>& decode,
                                      std::vector<std::vector<int32_t>>& drafts);

// A verified member samples row by row (`rows` of `vocab` logits from `logits`) while its own
// sample equals the draft, exactly as plain decoding would sample those positions: it stops at
// the first sample that differs, finishes the request, or follows the last draft. The samples go
// to `sampled`; an error is the generation's (a constraint's budget ran out).
absl::Status SampleWhileDraftsHold(Generation& generation, const float* logits, int64_t vocab,
                                   size_t rows, const std::vector<int32_t>& drafts,
                                   std::vector<GeneratedToken>* sampled);

// The drafts kept: every sample but the last matched its draft, and the last did too when a stop
// rule ended the run on it.
size_t AcceptedDrafts(const std::vector<GeneratedToken>& sampled,
                      const std::vector<int32_t>& drafts);

}  // namespace walsh

#endif  // WALSH_WORKER_SPECULATIVE_VERIFICATION_H_
