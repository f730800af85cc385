// The seam between a projector and the device that runs it (docs/vision.md §3): preprocessed
// pixels in, one row of the text model's width out per merged window of patches. The CPU encoder
// (vision_encoder.h) and the CUDA one (cuda_vision_encoder.h) give the same bits for the same
// weights and pixels.
#ifndef WALSH_WORKER_VISION_IMAGE_ENCODER_H_
#define WALSH_WORKER_VISION_IMAGE_ENCODER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/model/mmproj_config.h"
#include "worker/vision/pixel_values.h"

namespace walsh {

class ImageEncoder {
 public:
  virtual ~ImageEncoder() = default;

  virtual const MmprojConfig& config() const = 0;
  // "cpu", or "cuda:N" for device N.
  virtual std::string device() const = 0;

  // (height / 32) * (width / 32) rows of projection_dim, in raster order of the merged grid.
  // INVALID_ARGUMENT if a side is not a positive multiple of patch size times the merge. Const:
  // several threads may encode at once. The CPU encoder spreads its work over `pool` when given
  // (the same bits whatever its size); the CUDA one ignores it.
  absl::StatusOr<std::vector<float>> Encode(const PixelValues& pixels,
                                            ThreadPool* pool = nullptr) const {
    return EncodeImage(pixels, pool);
  }

 private:
  virtual absl::StatusOr<std::vector<float>> EncodeImage(const PixelValues& pixels,
                                                         ThreadPool* pool) const = 0;
};

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_IMAGE_ENCODER_H_
