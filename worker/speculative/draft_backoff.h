// When a request stops drafting for a while (docs/speculative_decoding.md, "Back-off"). A
// verification step costs more than a decode step, so drafts the target keeps rejecting slow a
// request down. A request's acceptance rate is a moving average of accepted / drafted tokens
// (each verification weighs 1/4). When it falls below the minimum, the request drafts nothing
// for a pause of decode steps that doubles with each pause in a row (4, 8, ..., 64), after which
// it drafts again from the minimum rate; a rate back above halfway between the minimum and 1
// ends the run of pauses. Pure bookkeeping: it never changes an output, only how many steps it
// takes.
#ifndef WALSH_WORKER_SPECULATIVE_DRAFT_BACKOFF_H_
#define WALSH_WORKER_SPECULATIVE_DRAFT_BACKOFF_H_

#include <cstdint>

namespace walsh {

struct DraftBackoff {
  double acceptance = 1.0;
  int64_t paused = 0;  // decode steps left without drafting
  int64_t pause = 0;   // the length of the last pause in this run of pauses (0: none)
};

// Whether the request drafts at this decode step; a paused step is counted down.
bool DraftsThisStep(DraftBackoff& backoff);

// After a verification of `drafted` tokens of which `accepted` were kept. A `min_acceptance`
// of 0 never pauses.
void RecordVerification(DraftBackoff& backoff, int64_t drafted, int64_t accepted,
                        double min_acceptance);

}  // namespace walsh

#endif  // WALSH_WORKER_SPECULATIVE_DRAFT_BACKOFF_H_
