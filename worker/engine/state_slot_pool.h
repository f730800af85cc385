// Fixed-size recurrent state slots for the Gated DeltaNet layers: per sequence and GDN layer a
// conv window of (conv_kernel - 1) inputs and one head_dim x head_dim state per value head.
#ifndef WALSH_WORKER_ENGINE_STATE_SLOT_POOL_H_
#define WALSH_WORKER_ENGINE_STATE_SLOT_POOL_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace walsh {

class StateSlotPool {
 public:
  StateSlotPool(int64_t slots, int64_t layers, int64_t conv_floats, int64_t recurrent_floats);

  static int64_t SlotBytes(int64_t layers, int64_t conv_floats, int64_t recurrent_floats) {
    return layers * (conv_floats + recurrent_floats) * static_cast<int64_t>(sizeof(float));
  }

  bool allocated() const { return storage_ != nullptr; }
  int64_t total() const { return slots_; }
  int64_t used() const { return slots_ - static_cast<int64_t>(free_.size()); }

  // A zeroed slot, or RESOURCE_EXHAUSTED.
  absl::StatusOr<int32_t> Allocate();
  void Release(int32_t slot);

  float* Conv(int32_t slot, int64_t layer) { return Layer(slot, layer); }
  float* Recurrent(int32_t slot, int64_t layer) { return Layer(slot, layer) + conv_floats_; }

 private:
  float* Layer(int32_t slot, int64_t layer) {
    return storage_.get() + (slot * layers_ + layer) * (conv_floats_ + recurrent_floats_);
  }

  int64_t slots_, layers_, conv_floats_, recurrent_floats_;
  // calloc: the kernel hands out zeroed pages lazily, so an unused budget costs nothing.
  std::unique_ptr<float, void (*)(void*)> storage_{nullptr, &std::free};
  std::vector<int32_t> free_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_STATE_SLOT_POOL_H_
