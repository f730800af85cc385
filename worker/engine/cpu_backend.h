// The CPU backend: the reference implementation of the backend interface on the host, with
// the kernels of kernels/cpu (AVX2 or scalar, picked at run time, bit-identical) over a thread
// pool, and tensor parallelism over in-process CPU ranks (every projection split by output rows
// per worker/parallel/shard_plan.h, the parts all-gathered).
#ifndef WALSH_WORKER_ENGINE_CPU_BACKEND_H_
#define WALSH_WORKER_ENGINE_CPU_BACKEND_H_

#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/engine/backend.h"
#include "worker/engine/cpu_rank_group.h"
#include "worker/parallel/cpu_communicator.h"
#include "worker/parallel/shard_plan.h"

namespace walsh {

struct CpuBackendOptions {
  int threads = 1;
  CpuIsa isa = CpuIsa::kScalar;
  int tp = 1;
  std::chrono::milliseconds collective_timeout{10000};
  int debug_stall_rank = -1;  // tests: this rank stops answering after 200 collectives
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& model, const CpuBackendOptions& options);

  std::string name() const override { return "cpu"; }
  BackendMemory Memory() const override;
  absl::Status AllocateCaches(const CacheGeometry& geometry) override;
  absl::Status ClearStateSlot(int32_t slot) override;
  absl::StatusOr<Tensor> Activation(Buffer id, int64_t rows, int64_t cols) override;
  absl::StatusOr<Q8Tensor> Quantized(int index, int64_t rows, int64_t cols,
                                     Q8Layout layout) override;
  absl::Status BeginStep(const StepPlan& plan) override;
  absl::Status Embed(const TernaryWeights& table, bool rotated, const int8_t* signs,
                     Tensor out) override;
  absl::Status RmsNorm(Tensor x, const float* weight, float eps, Tensor out) override;
  absl::Status GatherLogitRows(Tensor x, Tensor out) override;
  absl::Status AddInPlace(Tensor acc, Tensor x) override;
  absl::Status SwiGlu(Tensor gate, Tensor up, Tensor out) override;
  absl::Status RotateQuantize(Tensor x, Transform t, const int8_t* signs, Q8Tensor out) override;
  absl::Status Rotate(Tensor x, Transform t, const int8_t* signs, Tensor out) override;
  absl::Status MatMul(const Projection& p, Q8Tensor x, Tensor y) override;
  absl::Status MatMulF32(const Projection& p, Tensor x, Tensor y) override;
  absl::Status DenseProject(const DenseWeight& w, Tensor x, Tensor y, int64_t col_offset) override;
  absl::Status AttentionPrepare(const AttentionWeights& w, int64_t layer, Tensor q_gate, Tensor k,
                                Tensor v) override;
  absl::Status Attention(int64_t layer, Tensor q_gate, Tensor out) override;
  absl::Status GdnConv(const GdnWeights& w, int64_t layer, Tensor qkv, Tensor u) override;
  absl::Status GdnRecurrence(const GdnWeights& w, int64_t layer, Tensor u, Tensor z,
                             Tensor alpha_beta, Tensor out) override;
  absl::Status ReadToHost(Tensor x, float* host) override;
  bool broken() const override { return comm_ != nullptr && comm_->broken(); }

 private:
  using FreeDeleter = void (*)(void*);
  // Runs rows [0, rows) of a projection on the thread pool, or on the TP ranks' shards.
  absl::Status SplitRows(const Projection& p, const std::function<void(int64_t, int64_t)>& rows_fn);
  // x's row, or its GDN-permuted copy in `scratch`, ready for the FWHT.
  const float* PermutedRow(const float* row, Transform t, float* scratch) const;
  GdnLayerParams GdnParams(const GdnWeights& w) const;
  float* KvLayer(int64_t layer) const;
  float* StateLayer(int32_t slot, int64_t layer) const;

  const Model& model_;
  CpuBackendOptions options_;
  ThreadPool pool_;
  std::vector<double> rope_inv_freq_;
  CacheGeometry geometry_;
  // calloc: the kernel hands out zeroed pages lazily, so an unused budget costs nothing.
  std::unique_ptr<float, FreeDeleter> kv_{nullptr, &std::free};
  std::unique_ptr<float, FreeDeleter> state_{nullptr, &std::free};
  std::vector<float> buffers_[static_cast<int>(Buffer::kCount)];
  std::vector<Q8Block128> quantized_[kQuantizedBuffers];
  StepPlan plan_;
  std::unique_ptr<CpuCommunicator> comm_;
  std::unique_ptr<ShardPlan> shards_;
  std::unique_ptr<CpuRankGroup> ranks_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_CPU_BACKEND_H_
