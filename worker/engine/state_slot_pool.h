// The bookkeeping of the fixed-size recurrent state slots for the Gated DeltaNet layers, whose
// storage the backend holds (backend.h): per sequence and GDN layer a conv window of
// (conv_kernel - 1) inputs and one head_dim x head_dim state per value head.
#ifndef WALSH_WORKER_ENGINE_STATE_SLOT_POOL_H_
#define WALSH_WORKER_ENGINE_STATE_SLOT_POOL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace walsh {

class StateSlotPool {
 public:
  explicit StateSlotPool(int64_t slots);

  static int64_t SlotBytes(int64_t layers, int64_t conv_floats, int64_t recurrent_floats) {
    return layers * (conv_floats + recurrent_floats) * static_cast<int64_t>(sizeof(float));
  }

  int64_t total() const { return slots_; }
  int64_t used() const { return slots_ - static_cast<int64_t>(free_.size()); }
  int64_t free() const { return static_cast<int64_t>(free_.size()); }

  // A free slot (the caller clears its storage), or RESOURCE_EXHAUSTED.
  absl::StatusOr<int32_t> Allocate();
  void Release(int32_t slot);

 private:
  int64_t slots_;
  std::vector<int32_t> free_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_STATE_SLOT_POOL_H_
