// A vision projector loaded beside a text model (--mmproj): the file checked whole (docs/vision.md
// §1: keys, every tensor's name, shape and type, the output width against the text model's hidden
// size), its weights converted once, and the encoder over them on the CPU or a CUDA device,
// shared by every request.
#ifndef WALSH_WORKER_VISION_VISION_MODEL_H_
#define WALSH_WORKER_VISION_VISION_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/vision/image_encoder.h"

namespace walsh {

// Where the encoder runs: the CPU, or CUDA device `cuda_device`.
struct VisionPlacement {
  bool cuda = false;
  int cuda_device = 0;
};

class VisionModel {
 public:
  // INVALID_ARGUMENT naming the key or tensor at fault (NOT_FOUND for a missing file), prefixed
  // with the file's path; FAILED_PRECONDITION for CUDA without a device or in a build without
  // CUDA.
  static absl::StatusOr<std::unique_ptr<VisionModel>> Load(const std::string& path,
                                                           int64_t text_embedding_length,
                                                           VisionPlacement placement = {});

  const MmprojConfig& config() const { return encoder_->config(); }
  const ImageEncoder& encoder() const { return *encoder_; }

  // Encodes the smallest image (one merged token's pixels, all planes 0: mid-grey at the usual mean
  // of 0.5) and checks that every value is finite: the vision path's canary, before the worker
  // serves.
  absl::Status Canary(ThreadPool* pool) const;

 private:
  explicit VisionModel(std::unique_ptr<ImageEncoder> encoder) : encoder_(std::move(encoder)) {}

  std::unique_ptr<ImageEncoder> encoder_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_VISION_MODEL_H_
