#include "worker/engine/state_slot_pool.h"

#include "absl/strings/str_cat.h"

namespace walsh {

StateSlotPool::StateSlotPool(int64_t slots) : slots_(slots) {
  for (int64_t s = slots - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
}

absl::StatusOr<int32_t> StateSlotPool::Allocate() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("recurrent state: all ", slots_, " slots are in use"));
  }
  const int32_t slot = free_.back();
  free_.pop_back();
  return slot;
}

void StateSlotPool::Release(int32_t slot) { free_.push_back(slot); }

}  // namespace walsh
