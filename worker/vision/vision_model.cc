#include "worker/vision/vision_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/gguf_file.h"
#include "worker/model/mmproj_config.h"
#include "worker/vision/vision_encoder.h"
#ifdef WALSH_HAVE_CUDA
#include "worker/vision/cuda_vision_encoder.h"
#endif

namespace walsh {
namespace {

absl::Status InFile(const std::string& path, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("projector ", path, ": ", status.message()));
}

absl::StatusOr<VisionWeights> CheckAndLoad(const std::string& path, int64_t text_width) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  ASSIGN_OR_RETURN(MmprojConfig config, ParseMmprojConfig(*file));
  RETURN_IF_ERROR(CheckMmprojInventory(*file, config));
  RETURN_IF_ERROR(CheckMmprojFitsText(config, text_width));
  return VisionWeights::Load(*file, config);
}

absl::StatusOr<std::unique_ptr<ImageEncoder>> MakeEncoder(VisionWeights weights,
                                                          VisionPlacement placement) {
  if (!placement.cuda) return std::make_unique<VisionEncoder>(std::move(weights));
#ifdef WALSH_HAVE_CUDA
  ASSIGN_OR_RETURN(std::unique_ptr<CudaVisionEncoder> encoder,
                   CudaVisionEncoder::Create(weights, {.device = placement.cuda_device}));
  return encoder;
#else
  return absl::FailedPreconditionError(
      absl::StrCat("the vision encoder on cuda:", placement.cuda_device,
                   ": this build has no CUDA backend (configure with nvcc present, "
                   "-DWALSH_CUDA=ON)"));
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<VisionModel>> VisionModel::Load(const std::string& path,
                                                               int64_t text_embedding_length,
                                                               VisionPlacement placement) {
  absl::StatusOr<VisionWeights> weights = CheckAndLoad(path, text_embedding_length);
  if (!weights.ok()) return InFile(path, weights.status());
  absl::StatusOr<std::unique_ptr<ImageEncoder>> encoder =
      MakeEncoder(std::move(*weights), placement);
  if (!encoder.ok()) return InFile(path, encoder.status());
  return std::unique_ptr<VisionModel>(new VisionModel(std::move(*encoder)));
}

absl::Status VisionModel::Canary(ThreadPool* pool) const {
  const int64_t side = config().patch_size * config().spatial_merge_size;
  const PixelValues grey{
      .height = side, .width = side, .planes = std::vector<float>(3 * side * side)};
  ASSIGN_OR_RETURN(std::vector<float> rows, encoder_->Encode(grey, pool));
  for (float v : rows) {
    if (!std::isfinite(v)) {
      return absl::InternalError("the vision canary produced a non-finite value");
    }
  }
  return absl::OkStatus();
}

}  // namespace walsh
