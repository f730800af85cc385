// The CPU backend: the reference implementation of the backend interface on the host, with the
// kernels of kernels/cpu (the ISA of kernels/cpu/isa.h, picked at run time; all bit-identical)
// over a thread pool.
// A tensor-parallel group of CPU ranks is one CpuBackend per rank (engine.h).
#ifndef WALSH_WORKER_ENGINE_CPU_BACKEND_H_
#define WALSH_WORKER_ENGINE_CPU_BACKEND_H_

#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "common/zeroed_pages.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ternary_product.h"
#include "worker/engine/backend.h"
#include "worker/engine/op_profile.h"

namespace walsh {

struct CpuBackendOptions {
  int threads = 1;
  CpuIsa isa = CpuIsa::kScalar;
  OpProfile* profile = nullptr;  // EngineOptions::profile
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& model, const CpuBackendOptions& options);

  std::string name() const override { return "cpu"; }
  bool takes_image_inputs() const override { return true; }
  BackendMemory Memory() const override;
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
  using FreeDeleter = void (*)(void*);
  // One activation slot's memory (64-byte aligned).
  struct SlotMemory {
    std::unique_ptr<void, FreeDeleter> memory{nullptr, &std::free};
    int64_t bytes = 0;
  };
  absl::Status RotateQuantize(Tensor x, Transform t, const int8_t* signs, Tensor out);
  // Runs the product over its local rows on the thread pool.
  void Run(const TernaryProduct& product, int64_t rows, bool f32);
  template <typename T>
  T* KvLayer(int64_t layer) const;
  template <typename T>
  absl::Status Prepare(const AttentionWeights& w, int64_t layer, const AttentionShard& heads,
                       Tensor q_gate, Tensor k, Tensor v);
  template <typename T>
  absl::Status Attend(int64_t layer, const AttentionShard& heads, Tensor q_gate, Tensor out);
  float* StateLayer(int32_t slot, int64_t layer) const;
  float* StateBase() const { return reinterpret_cast<float*>(state_.data()); }
  // The state slot that keeps a copy of token t's state (StepPlan::plane_of_token), or -1.
  int32_t PlaneOf(int64_t t) const {
    return plan_.plane_of_token.empty() ? -1 : plan_.plane_of_token[t];
  }

  const Model& model_;
  CpuBackendOptions options_;
  ThreadPool pool_;
  std::vector<double> rope_inv_freq_;
  std::vector<uint8_t> rope_stream_of_pair_;
  CacheGeometry geometry_;
  ZeroedPages kv_;     // fp16 or fp32 elements
  ZeroedPages state_;  // float

  SlotMemory slots_[kActivationSlots];
  std::vector<SlotMemory> retired_;  // outgrown slot memory, freed when the next step begins
  std::vector<float> tree_scratch_;  // TreeSum's inner levels
  std::vector<int64_t> dense_rows_;  // DenseProject's weight rows, kept across calls
  StepPlan plan_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_CPU_BACKEND_H_
