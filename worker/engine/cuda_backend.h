// The CUDA backend (sm_90): the model's packed weights uploaded once and resident at their file
// size (one copy of the file's tensor data; no dense copy anywhere), each ternary tensor whose
// rows fit repacked in place into the lanes layout (kernels/ternary_lanes_layout.h), KV pages and
// GatedDeltaNet state slots in device memory, and every op of the graph a kernel of kernels/cuda on
// one stream. Only the logits come back to the host. Image steps bring their rows and M-RoPE
// positions in the plan (docs/vision.md §4); the vision encoder that made the rows runs on the
// host. Its numerics are the CPU backend's (kernels/token_ops.h), so its logits are meant to
// equal the CPU's bit for bit.
//
// Memory: the weights plus the caches must fit in gpu_memory_utilization × the device's memory;
// a model that does not is refused with the numbers, and the caches are cut to what is left.
#ifndef WALSH_WORKER_ENGINE_CUDA_BACKEND_H_
#define WALSH_WORKER_ENGINE_CUDA_BACKEND_H_

#include <map>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "kernels/cuda/ops.h"
#include "worker/engine/backend.h"
#include "worker/engine/cuda_device_buffer.h"
#include "worker/engine/cuda_op_timeline.h"
#include "worker/engine/packed_upload.h"
#include "worker/engine/product_builder.h"

namespace walsh {

class CudaBackend final : public Backend {
 public:
  // FAILED_PRECONDITION when no CUDA device answers, RESOURCE_EXHAUSTED when the weights do
  // not fit; both name the numbers. With a profile, every op adds its device time to it
  // (cuda_op_timeline.h).
  static absl::StatusOr<std::unique_ptr<Backend>> Create(const Model& model, int device,
                                                         double gpu_memory_utilization,
                                                         OpProfile* profile = nullptr);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  bool takes_image_inputs() const override { return true; }
  int device() const override { return device_; }
  void* device_stream() const override { return stream_; }
  BackendMemory Memory() const override;
  int64_t cache_bytes_available() const override { return cache_room_; }
  absl::Status AllocateCaches(const CacheGeometry& geometry) override;
  absl::Status ClearStateSlot(int32_t slot) override;
  absl::Status CopyStateSlot(int32_t from, int32_t to) override;
  absl::Status CopyKvPage(int32_t from, int32_t to) override;
  absl::StatusOr<Tensor> Activation(int slot, int64_t rows, int64_t cols, DType dtype,
                                    Q8Layout layout) override;
  absl::Status BeginStep(const StepPlan& plan) override;
  absl::Status Embed(const TernaryWeights& table, bool rotated, const int8_t* signs,
                     Tensor out) override;
  absl::Status RmsNorm(Tensor x, const float* weight, float eps, Tensor out) override;
  absl::Status GatherLogitRows(Tensor x, Tensor out) override;
  absl::Status AddInPlace(Tensor acc, Tensor x) override;
  absl::Status SwiGlu(Tensor gate, Tensor up, Tensor out) override;
  absl::Status Rotate(Tensor x, Transform t, const int8_t* signs, Tensor out) override;
  absl::Status MatMul(const Projection& p, Tensor x, const RowSelection& rows, Tensor y) override;
  absl::Status MatMulSlices(const Projection& p, Tensor x, int64_t x_first_col,
                            const std::vector<Span>& slices,
                            const std::vector<Tensor>& partials) override;
  absl::Status TreeSum(const std::vector<Tensor>& leaves, Tensor out) override;
  absl::Status DenseProject(const DenseWeight& w, Tensor x, const RowSelection& rows, Tensor y,
                            int64_t col_offset) override;
  absl::Status CopyColumns(Tensor x, int64_t col_begin, Tensor out) override;
  absl::Status PlaceColumns(Tensor x, Tensor out, int64_t col_begin) override;
  absl::Status Ungroup(Tensor x, int64_t n_k, int64_t rep, int64_t hd, Tensor out) override;
  absl::Status AttentionPrepare(const AttentionWeights& w, int64_t layer,
                                const AttentionShard& heads, Tensor q_gate, Tensor k,
                                Tensor v) override;
  absl::Status Attention(int64_t layer, const AttentionShard& heads, Tensor q_gate,
                         Tensor out) override;
  absl::Status GdnConv(const GdnLayerParams& p, int64_t layer, Tensor qkv, Tensor u) override;
  absl::Status GdnRecurrence(const GdnLayerParams& p, int64_t layer, Tensor u, Tensor z,
                             Tensor alpha_beta, Tensor out) override;
  absl::Status ReadToHost(Tensor x, float* host) override;

 private:
  CudaBackend(const Model& model, int device, OpProfile* profile);
  absl::Status Init(double gpu_memory_utilization);
  // The status of a launch naming `op`, and the profile's mark after it.
  absl::Status Launch(int code, const char* op);
  // Rewrites each ternary tensor whose rows fit the lanes layout in place on the device.
  absl::Status RepackTernaryTensors();
  // w with its resident data and the layout its rows have there. A view into a repacked tensor
  // must start at one of its rows and be as wide (every product and table view does).
  absl::StatusOr<TernaryWeights> DeviceWeights(const TernaryWeights& w);
  // The device address of model data at `host` (`bytes` long): inside the resident copy of the
  // file's tensor data, or uploaded once on first use (the contract's sign vectors).
  absl::StatusOr<const void*> Resident(const void* host, int64_t bytes);
  template <typename T>
  absl::StatusOr<const T*> ResidentAs(const T* host, int64_t count) {
    auto p = Resident(host, count * static_cast<int64_t>(sizeof(T)));
    if (!p.ok()) return p.status();
    return static_cast<const T*>(*p);
  }
  absl::Status RotateQuantize(Tensor x, Transform t, const int8_t* signs, Tensor out);
  // The CUDA products take int8 activations only.
  static absl::Status RequireInt8(const Projection& p, Tensor x);
  // p with device pointers for its weights.
  absl::StatusOr<GdnLayerParams> DeviceParams(const GdnLayerParams& p);
  // The product with its weights and row list swapped for their resident copies.
  absl::Status RunProduct(TernaryProduct product, const RowSelection* rows, int64_t n_rows,
                          const char* op);
  absl::Status Copy2D(const float* from, int64_t from_stride, float* to, int64_t to_stride,
                      int64_t rows, int64_t cols, const char* op);
  cuda::AttentionShape AttentionShapeOf(const AttentionShard& heads) const;
  uint8_t* KvLayer(int64_t layer) const;  // the layer's K rows of page 0
  int64_t KvRowBytes() const;             // one position's K (or V) row of one layer
  cuda::GdnStateView StateView(int64_t layer) const;

  const Model& model_;
  int device_;
  cudaStream_t stream_ = nullptr;
  CudaOpTimeline timeline_;
  const uint8_t* host_base_ = nullptr;  // the file's tensor data on the host
  int64_t weight_bytes_ = 0;
  DeviceBuffer weights_;
  absl::flat_hash_map<const void*, DeviceBuffer> uploads_;
  // The repacked tensors by their first byte on the host: where they end, and their width.
  struct LanesTensor {
    const uint8_t* end;
    int64_t cols;
  };
  std::map<const uint8_t*, LanesTensor> lanes_tensors_;
  DeviceBuffer rope_inv_freq_, rope_stream_of_pair_;
  int64_t cache_room_ = 0;
  CacheGeometry geometry_;
  DeviceBuffer kv_, state_;
  DeviceBuffer slots_[kActivationSlots];
  std::vector<DeviceBuffer> retired_;  // outgrown slot memory, freed when the next step begins
  DeviceBuffer embed_scratch_, rotate_scratch_, scores_;
  // The step: host arrays (kept alive for the copies) and their device twins.
  struct StepArrays {
    std::vector<int32_t> tokens, pos, seq_of, seq_first, seq_count, seq_slot, page_offset, pages,
        logit_rows;
    std::vector<int64_t> score_offset;
    // An image step's inputs (StepPlan): rotary streams, and the rows that replace embeddings.
    std::vector<int32_t> rope_of_token, image_row_of_token;
    std::vector<int32_t> plane_of_token;  // a speculative step's GDN state planes
    std::shared_ptr<const std::vector<float>> image_rows;
    bool replaces_rows = false;  // some token's embedding is an image row
  } host_step_;
  // The step's arrays in one image (packed_upload.h), copied from pinned memory at once; the
  // pointers into the device copy that the ops read beside step_.
  PackedUpload step_image_;
  PinnedHostBuffer pinned_step_;
  DeviceBuffer d_step_;
  const int32_t* d_tokens_ = nullptr;
  const int32_t* d_logit_rows_ = nullptr;
  const int32_t* d_image_row_of_token_ = nullptr;
  const float* d_image_rows_ = nullptr;
  cuda::StepView step_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_CUDA_BACKEND_H_
