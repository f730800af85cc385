#include "worker/server/snapshot_policy.h"

#include <algorithm>

namespace walsh {

std::vector<SnapshotPoint> PlanSnapshots(int64_t tokens, const PrefixLookup& lookup,
                                         int64_t page_size, int64_t min_tokens, int64_t interval) {
  std::vector<SnapshotPoint> points;
  if (lookup.outcome == PrefixOutcome::kOff || tokens < 2) return points;
  const int64_t last = tokens - 1;  // a hit always leaves the last token to compute
  const int64_t branch = std::min(lookup.kv_tokens, last / page_size * page_size);
  const bool at_branch = branch > lookup.hit_tokens && branch >= min_tokens && branch < last;
  const int64_t step = interval / page_size * page_size;
  if (step > 0) {
    for (int64_t p = (lookup.hit_tokens / step + 1) * step; p < last; p += step) {
      if (p >= min_tokens && !(at_branch && p == branch)) points.push_back({p, "interval"});
    }
  }
  if (at_branch) points.push_back({branch, "branch"});
  if (last > lookup.hit_tokens && last >= min_tokens) points.push_back({last, "prompt"});
  std::sort(points.begin(), points.end(),
            [](const SnapshotPoint& a, const SnapshotPoint& b) { return a.position < b.position; });
  return points;
}

}  // namespace walsh
