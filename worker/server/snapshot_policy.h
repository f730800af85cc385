// Where the scheduler stops a prefill for a prefix-cache snapshot (docs/prefix_caching.md). A
// GatedDeltaNet snapshot is as large as a sequence's whole recurrent state (about 150 MB at the
// 27B shape), so they are taken sparingly, at positions a later request is likely to resume
// from, and only for prefixes of at least min_tokens:
// - branch: the end of the cached pages a request extends when no snapshot covers them (a shared
//   document with a new question: the next question resumes there);
// - prompt: the end of the prompt but its last token (the same prompt again, or any extension);
// - interval: every `interval` tokens of a long prefill (whole pages), so that the first request
//   that branches off a shared document finds a snapshot at the last interval before the branch;
// and, at the end of a finished request, everything it fed (the next turn of a conversation).
#ifndef WALSH_WORKER_SERVER_SNAPSHOT_POLICY_H_
#define WALSH_WORKER_SERVER_SNAPSHOT_POLICY_H_

#include <cstdint>
#include <vector>

#include "worker/engine/engine.h"

namespace walsh {

struct SnapshotPoint {
  int64_t position = 0;
  const char* at = "";  // "interval", "branch" or "prompt"
};

// The positions after lookup.hit_tokens, in increasing order, where a sequence of `tokens`
// input tokens should be snapshotted; `interval` (0: none) is rounded down to whole pages.
std::vector<SnapshotPoint> PlanSnapshots(int64_t tokens, const PrefixLookup& lookup,
                                         int64_t page_size, int64_t min_tokens,
                                         int64_t interval = 0);

// Whether a finished request that fed `fed` tokens is snapshotted at its end.
inline bool SnapshotAtFinish(const PrefixLookup& lookup, int64_t fed, int64_t min_tokens) {
  return lookup.outcome != PrefixOutcome::kOff && fed >= min_tokens && fed > lookup.hit_tokens;
}

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_SNAPSHOT_POLICY_H_
