// What proposes the tokens a speculative step verifies (docs/speculative_decoding.md). A
// drafter only guesses: the scheduler keeps a drafted token only when the target model's own
// sample at that position equals it, so no drafter can change an output, only how many steps it
// takes. Called from the scheduler's thread alone.
#ifndef WALSH_WORKER_SPECULATIVE_DRAFTER_H_
#define WALSH_WORKER_SPECULATIVE_DRAFTER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace walsh {

// One request of a decode step: its tokens so far (prompt + outputs; the last one sampled and
// not yet fed to the target), and how many tokens may follow them.
struct DraftRequest {
  uint64_t key = 0;  // the same for every step of one request, until Forget
  absl::Span<const int32_t> tokens;
  int64_t max_tokens = 0;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // At most requests[i].max_tokens tokens to follow requests[i].tokens, for every request of
  // the step at once (a draft model runs them as one batch); empty where it has no guess. Best
  // effort, so no status: a drafter that fails for a request drafts nothing for it.
  virtual std::vector<std::vector<int32_t>> Draft(absl::Span<const DraftRequest> requests) = 0;
  // The request ended or gave way (preempted): whatever the drafter keeps for it goes.
  virtual void Forget(uint64_t key) = 0;
};

}  // namespace walsh

#endif  // WALSH_WORKER_SPECULATIVE_DRAFTER_H_
