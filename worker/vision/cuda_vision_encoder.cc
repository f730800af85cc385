#include "worker/vision/cuda_vision_encoder.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vision_ops.h"
#include "worker/engine/cuda_stream_scope.h"
#include "worker/vision/patch_layout.h"

namespace walsh {
namespace {

// A launcher's error code as a status naming the encoder's step.
absl::Status Launch(int code, const std::string& step) {
  return CudaStatus(static_cast<cudaError_t>(code), "vision encoder " + step);
}

// `host` into a new allocation of exactly its size.
template <typename T>
absl::Status UploadTo(const std::vector<T>& host, DeviceBuffer& to, const std::string& what) {
  const int64_t bytes = static_cast<int64_t>(host.size() * sizeof(T));
  RETURN_IF_ERROR(to.Allocate(bytes, what));
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpy(to.as<void>(), host.data(), bytes, cudaMemcpyHostToDevice),
                    "upload " + what);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaVisionEncoder>> CudaVisionEncoder::Create(
    const VisionWeights& weights, Options options) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("the vision encoder on cuda:", options.device, ": ",
                     e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device found"));
  }
  if (options.device < 0 || options.device >= count) {
    return absl::FailedPreconditionError(absl::StrCat("the vision encoder on cuda:", options.device,
                                                      ": there are ", count, " CUDA devices"));
  }
  CurrentDevice on(options.device);
  RETURN_IF_ERROR(on.Set());
  std::unique_ptr<CudaVisionEncoder> e(new CudaVisionEncoder(weights.config, options));
  RETURN_IF_ERROR(e->Upload(weights));
  return e;
}

absl::Status CudaVisionEncoder::Upload(const VisionWeights& w) {
  RETURN_IF_ERROR(UploadTo(w.patch_w, patch_w_, "v.patch_embd.weight"));
  RETURN_IF_ERROR(UploadTo(w.patch_b, patch_b_, "v.patch_embd.bias"));
  RETURN_IF_ERROR(UploadTo(w.position, position_, "v.position_embd.weight"));
  blocks_.resize(w.blocks.size());
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    for (size_t t = 0; t < std::size(Block::kNamed); ++t) {
      const auto [host_field, suffix] = VisionBlockWeights::kNamed[t];
      RETURN_IF_ERROR(UploadTo(w.blocks[i].*host_field, blocks_[i].*Block::kNamed[t].first,
                               absl::StrCat("v.blk.", i, ".", suffix)));
    }
  }
  RETURN_IF_ERROR(UploadTo(w.post_ln_w, post_ln_w_, "v.post_ln.weight"));
  RETURN_IF_ERROR(UploadTo(w.post_ln_b, post_ln_b_, "v.post_ln.bias"));
  RETURN_IF_ERROR(UploadTo(w.mm0_w, mm0_w_, "mm.0.weight"));
  RETURN_IF_ERROR(UploadTo(w.mm0_b, mm0_b_, "mm.0.bias"));
  RETURN_IF_ERROR(UploadTo(w.mm2_w, mm2_w_, "mm.2.weight"));
  RETURN_IF_ERROR(UploadTo(w.mm2_b, mm2_b_, "mm.2.bias"));
  return UploadTo(std::vector<int32_t>{0}, zero_page_, "the attention's page table");
}

absl::StatusOr<std::vector<float>> CudaVisionEncoder::EncodeImage(const PixelValues& pixels,
                                                                  ThreadPool* /*pool*/) const {
  const MmprojConfig& c = config_;
  RETURN_IF_ERROR(CheckPixelGrid(c, pixels));
  const int64_t p = c.patch_size, m = c.spatial_merge_size, d = c.embedding_length;
  const int64_t hd = c.head_dim(), ff = c.feed_forward_length, heads = c.head_count;
  const PatchGrid grid = WindowOrder(pixels.height / p, pixels.width / p, m);
  const int64_t n = grid.size(), merged = c.merged_width(), tokens = n / (m * m);
  const std::vector<float> patches = GatherPatches(pixels, grid, p);
  const PositionTaps taps = BilinearPositionTaps(grid, c.position_side());
  const RopeTable rope = MakeRopeTable(grid, hd);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t chunk = std::clamp<int64_t>(options_.max_scores / (heads * n), 1, n);

  // Destroyed in reverse: the buffers freed in the stream's order, the stream synchronized, the
  // thread's device restored; the host arrays above outlive every copy from them.
  CurrentDevice on(options_.device);
  RETURN_IF_ERROR(on.Set());
  OwnedStream stream;
  RETURN_IF_ERROR(stream.Create());
  const cudaStream_t s = stream.get();
  StreamBuffer patches_d, tap_row, tap_weight, cos, sin, x, a, qkv, attn, up, y, scores, hidden,
      out;
  RETURN_IF_ERROR(patches_d.Upload(patches, s, "the image's patches"));
  RETURN_IF_ERROR(tap_row.Upload(taps.table_row, s, "the position taps"));
  RETURN_IF_ERROR(tap_weight.Upload(taps.weight, s, "the position weights"));
  RETURN_IF_ERROR(cos.Upload(rope.cos, s, "the rotary cosines"));
  RETURN_IF_ERROR(sin.Upload(rope.sin, s, "the rotary sines"));
  const auto floats = [](int64_t count) { return count * static_cast<int64_t>(sizeof(float)); };
  RETURN_IF_ERROR(x.Allocate(floats(n * d), s, "the encoder's residual stream"));
  RETURN_IF_ERROR(a.Allocate(floats(n * d), s, "the encoder's normed rows"));
  RETURN_IF_ERROR(qkv.Allocate(floats(n * 3 * d), s, "the encoder's q, k and v"));
  RETURN_IF_ERROR(attn.Allocate(floats(n * d), s, "the encoder's attention"));
  RETURN_IF_ERROR(up.Allocate(floats(n * ff), s, "the encoder's MLP"));
  RETURN_IF_ERROR(y.Allocate(floats(n * d), s, "the encoder's layer outputs"));
  RETURN_IF_ERROR(scores.Allocate(floats(chunk * heads * n), s, "the encoder's attention scores"));
  RETURN_IF_ERROR(hidden.Allocate(floats(tokens * merged), s, "the merger's hidden rows"));
  RETURN_IF_ERROR(out.Allocate(floats(tokens * c.projection_dim), s, "the image's rows"));

  RETURN_IF_ERROR(Launch(cuda::F32Linear(patches_d.as<float>(), n, 3 * p * p, patch_w_.as<float>(),
                                         patch_b_.as<float>(), d, x.as<float>(), s),
                         "patch embedding"));
  RETURN_IF_ERROR(Launch(cuda::AddPositionTaps(x.as<float>(), n, d, position_.as<float>(),
                                               tap_row.as<int32_t>(), tap_weight.as<float>(), s),
                         "position embedding"));
  const float eps = c.layer_norm_epsilon;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    const std::string at = absl::StrCat("v.blk.", i, ".");
    RETURN_IF_ERROR(Launch(cuda::LayerNormRows(x.as<float>(), n, d, b.ln1_w.as<float>(),
                                               b.ln1_b.as<float>(), eps, a.as<float>(), s),
                           at + "ln1"));
    RETURN_IF_ERROR(Launch(cuda::F32Linear(a.as<float>(), n, d, b.qkv_w.as<float>(),
                                           b.qkv_b.as<float>(), 3 * d, qkv.as<float>(), s),
                           at + "attn_qkv"));
    RETURN_IF_ERROR(Launch(
        cuda::Rope2dInPlace(qkv.as<float>(), n, d, heads, cos.as<float>(), sin.as<float>(), s),
        at + "rope"));
    for (int64_t q = 0; q < n; q += chunk) {
      RETURN_IF_ERROR(Launch(
          cuda::FullAttention(qkv.as<float>(), n, d, heads, q, std::min(n, q + chunk), scale,
                              zero_page_.as<int32_t>(), scores.as<float>(), attn.as<float>(), s),
          at + "attention"));
    }
    RETURN_IF_ERROR(Launch(cuda::F32Linear(attn.as<float>(), n, d, b.out_w.as<float>(),
                                           b.out_b.as<float>(), d, y.as<float>(), s),
                           at + "attn_out"));
    RETURN_IF_ERROR(Launch(cuda::AddInPlace(x.as<float>(), y.as<float>(), n * d, s),
                           at + "attention residual"));
    RETURN_IF_ERROR(Launch(cuda::LayerNormRows(x.as<float>(), n, d, b.ln2_w.as<float>(),
                                               b.ln2_b.as<float>(), eps, a.as<float>(), s),
                           at + "ln2"));
    RETURN_IF_ERROR(Launch(cuda::F32Linear(a.as<float>(), n, d, b.up_w.as<float>(),
                                           b.up_b.as<float>(), ff, up.as<float>(), s),
                           at + "ffn_up"));
    RETURN_IF_ERROR(Launch(cuda::GeluInPlace(up.as<float>(), n * ff, cuda::Gelu::kTanh, s),
                           at + "gelu (tanh)"));
    RETURN_IF_ERROR(Launch(cuda::F32Linear(up.as<float>(), n, ff, b.down_w.as<float>(),
                                           b.down_b.as<float>(), d, y.as<float>(), s),
                           at + "ffn_down"));
    RETURN_IF_ERROR(
        Launch(cuda::AddInPlace(x.as<float>(), y.as<float>(), n * d, s), at + "mlp residual"));
  }
  // Post-norm per patch; each window's m * m consecutive patches are one row of the merger's.
  RETURN_IF_ERROR(Launch(cuda::LayerNormRows(x.as<float>(), n, d, post_ln_w_.as<float>(),
                                             post_ln_b_.as<float>(), eps, a.as<float>(), s),
                         "post_ln"));
  RETURN_IF_ERROR(Launch(cuda::F32Linear(a.as<float>(), tokens, merged, mm0_w_.as<float>(),
                                         mm0_b_.as<float>(), merged, hidden.as<float>(), s),
                         "mm.0"));
  RETURN_IF_ERROR(
      Launch(cuda::GeluInPlace(hidden.as<float>(), tokens * merged, cuda::Gelu::kErf, s),
             "merger gelu (erf)"));
  RETURN_IF_ERROR(Launch(cuda::F32Linear(hidden.as<float>(), tokens, merged, mm2_w_.as<float>(),
                                         mm2_b_.as<float>(), c.projection_dim, out.as<float>(), s),
                         "mm.2"));
  std::vector<float> rows(tokens * c.projection_dim);
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(rows.data(), out.as<void>(), floats(rows.size()), cudaMemcpyDeviceToHost, s),
      "download the image's rows"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s), "encode"));
  return rows;
}

}  // namespace walsh
