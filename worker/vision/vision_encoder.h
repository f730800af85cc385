// The vision tower and merger of a qwen3vl_merger projector on the CPU (docs/vision.md §3):
// preprocessed pixels in, one row of the text model's width out per merged 2x2 window of patches.
// Its weights are loaded once and shared; Encode is const and may run on several threads at once,
// each with a pool of its own (ThreadPool::ParallelFor is not reentrant).
#ifndef WALSH_WORKER_VISION_VISION_ENCODER_H_
#define WALSH_WORKER_VISION_VISION_ENCODER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/vision/image_encoder.h"
#include "worker/vision/pixel_values.h"
#include "worker/vision/vision_weights.h"

namespace walsh {

class VisionEncoder final : public ImageEncoder {
 public:
  // `isa` picks the kernel path of the linear layers and attention (kernels/cpu/isa.h): every
  // path gives the same bits.
  explicit VisionEncoder(VisionWeights weights, CpuIsa isa = BestCpuIsa())
      : w_(std::move(weights)), isa_(isa) {}

  const MmprojConfig& config() const override { return w_.config; }
  std::string device() const override { return "cpu"; }

 private:
  absl::StatusOr<std::vector<float>> EncodeImage(const PixelValues& pixels,
                                                 ThreadPool* pool) const override;

  VisionWeights w_;
  CpuIsa isa_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_VISION_ENCODER_H_
