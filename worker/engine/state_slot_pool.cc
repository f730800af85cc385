#include "worker/engine/state_slot_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace walsh {

StateSlotPool::StateSlotPool(int64_t slots, int64_t layers, int64_t conv_floats,
                             int64_t recurrent_floats)
    : slots_(slots),
      layers_(layers),
      conv_floats_(conv_floats),
      recurrent_floats_(recurrent_floats) {
  storage_.reset(static_cast<float*>(std::calloc(
      static_cast<size_t>(slots * layers * (conv_floats + recurrent_floats)), sizeof(float))));
  for (int64_t s = slots - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
}

absl::StatusOr<int32_t> StateSlotPool::Allocate() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("recurrent state: all ", slots_, " slots are in use"));
  }
  const int32_t slot = free_.back();
  free_.pop_back();
  float* begin = Layer(slot, 0);
  std::fill(begin, begin + layers_ * (conv_floats_ + recurrent_floats_), 0.0f);
  return slot;
}

void StateSlotPool::Release(int32_t slot) { free_.push_back(slot); }

}  // namespace walsh
