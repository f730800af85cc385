// The vision encoder on a CUDA device (docs/vision.md §3): the projector's float32 weights
// uploaded once, and every op of the forward pass a kernel of kernels/cuda/vision.cu on a stream
// of the call's own, with the call's activations in device memory allocated in that stream's
// order (freeing them waits on nothing else on the device). What the layers need from the
// image's size (patch order, position taps, rotary angles) is computed on the host by the code
// the CPU encoder runs (patch_layout.h), and every kernel does the CPU encoder's float ops in its
// order, so the rows are meant to equal the CPU encoder's bit for bit.
#ifndef WALSH_WORKER_VISION_CUDA_VISION_ENCODER_H_
#define WALSH_WORKER_VISION_CUDA_VISION_ENCODER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/cuda_device_buffer.h"
#include "worker/vision/image_encoder.h"
#include "worker/vision/vision_weights.h"

namespace walsh {

class CudaVisionEncoder final : public ImageEncoder {
 public:
  struct Options {
    int device = 0;
    // Attention's scratch: at most this many scores at once, so a large image's queries run in
    // several launches (a test sets it small to cover that).
    int64_t max_scores = int64_t{64} << 20;
  };

  // FAILED_PRECONDITION when no CUDA device answers; RESOURCE_EXHAUSTED, with the numbers, when
  // the weights do not fit.
  static absl::StatusOr<std::unique_ptr<CudaVisionEncoder>> Create(const VisionWeights& weights,
                                                                   Options options);

  const MmprojConfig& config() const override { return config_; }
  std::string device() const override { return "cuda:" + std::to_string(options_.device); }

 private:
  absl::StatusOr<std::vector<float>> EncodeImage(const PixelValues& pixels,
                                                 ThreadPool* pool) const override;
  using Block = VisionBlockTensors<DeviceBuffer>;

  CudaVisionEncoder(const MmprojConfig& config, Options options)
      : config_(config), options_(options) {}
  absl::Status Upload(const VisionWeights& w);

  MmprojConfig config_;
  Options options_;
  DeviceBuffer patch_w_, patch_b_, position_;
  std::vector<Block> blocks_;
  DeviceBuffer post_ln_w_, post_ln_b_, mm0_w_, mm0_b_, mm2_w_, mm2_b_;
  DeviceBuffer zero_page_;  // one int32 0: attention's keys are a single page
};

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_CUDA_VISION_ENCODER_H_
