#include "worker/engine/cache_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace walsh {

absl::StatusOr<CachePlan> PlanCaches(const CacheBudget& b, int64_t page_bytes, int64_t slot_bytes) {
  CachePlan plan;
  plan.pages = b.kv_pages > 0 ? b.kv_pages : b.kv_cache_bytes / page_bytes;
  plan.slots = b.state_slots > 0 ? b.state_slots : b.state_bytes / slot_bytes;
  plan.snapshot_slots = std::max<int64_t>(0, b.snapshot_bytes) / slot_bytes;
  if (plan.slots * slot_bytes > b.room) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the state budget's ", plan.slots, " slots need ", plan.slots * slot_bytes,
                     " bytes; the device has ", b.room, " bytes for caches"));
  }
  const int64_t after_slots = b.room - plan.slots * slot_bytes;
  if (plan.pages * page_bytes > after_slots)
    plan.pages = std::max<int64_t>(0, after_slots / page_bytes);
  plan.snapshot_slots =
      std::min(plan.snapshot_slots,
               std::max<int64_t>(0, after_slots - plan.pages * page_bytes) / slot_bytes);
  if (plan.pages < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache budget of ", b.kv_cache_bytes, " bytes holds no page (a page is ", page_bytes,
        " bytes",
        b.room < INT64_MAX ? absl::StrCat("; the device has ", b.room, " bytes for caches") : "",
        ")"));
  }
  if (plan.slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat("state budget of ", b.state_bytes,
                                                   " bytes holds no slot (a slot is ", slot_bytes,
                                                   " bytes)"));
  }
  return plan;
}

}  // namespace walsh
