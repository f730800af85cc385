#include "worker/server/snapshot_policy.h"

#include <algorithm>

namespace walsh {

std::vector<SnapshotPoint> PlanSnapshots(int64_t tokens, const PrefixLookup& lookup,
                                         int64_t page_size, int64_t min_tokens) {
  std::vector<SnapshotPoint> points;
  if (lookup.outcome == PrefixOutcome::kOff || tokens < 2) return points;
  const int64_t last = tokens - 1;  // a hit always leaves the last token to compute
  const int64_t branch = std::min(lookup.kv_tokens, last / page_size * page_size);
  if (branch > lookup.hit_tokens && branch >= min_tokens && branch < last) {
    points.push_back({branch, "branch"});
  }
  if (last > lookup.hit_tokens && last >= min_tokens) points.push_back({last, "prompt"});
  return points;
}

}  // namespace walsh
