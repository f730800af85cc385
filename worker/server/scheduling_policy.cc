#include "worker/server/scheduling_policy.h"

#include <algorithm>

namespace walsh {

bool AdmittedBefore(const QueuePosition& a, const QueuePosition& b) {
  return a.priority != b.priority ? a.priority > b.priority : a.arrival < b.arrival;
}

int64_t PagesToAdmit(int64_t tokens, int64_t page_size) {
  return (tokens + 1 + page_size - 1) / page_size;
}

int64_t PagesStillToTake(int64_t tokens, int64_t pages_held, int64_t page_size) {
  return std::max<int64_t>(0, PagesToAdmit(tokens, page_size) - pages_held);
}

Admission DecideAdmission(int64_t tokens, const Capacity& c) {
  if (c.uses_kv && PagesToAdmit(tokens, c.page_size) > c.kv_pages_total) {
    return Admission::kNeverFits;
  }
  if (c.running >= c.max_running || c.state_slots_free <= 0) return Admission::kWait;
  if (c.uses_kv &&
      PagesToAdmit(tokens, c.page_size) - c.shared_pages > c.kv_pages_free - c.kv_pages_reserved) {
    return Admission::kWait;
  }
  return Admission::kAdmit;
}

int64_t PreemptionVictim(std::span<const uint64_t> arrivals) {
  if (arrivals.size() < 2) return -1;
  return std::max_element(arrivals.begin(), arrivals.end()) - arrivals.begin();
}

std::vector<int64_t> PlanBatch(std::span<const BatchCandidate> candidates, int64_t budget) {
  std::vector<int64_t> take(candidates.size(), 0);
  for (const bool decodes : {true, false}) {
    for (size_t i = 0; i < candidates.size() && budget > 0; ++i) {
      const BatchCandidate& c = candidates[i];
      if (c.decode != decodes || c.remaining <= 0) continue;
      int64_t n = std::min(c.remaining, budget);
      if (c.until_snapshot > 0) n = std::min(n, c.until_snapshot);
      take[i] = n;
      budget -= n;
    }
  }
  return take;
}

}  // namespace walsh
