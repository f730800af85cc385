// The CPU inference engine: the qwen35 forward pass on packed ternary weights, over a batch of
// sequences that each bring any number of new tokens (prefill chunks and decode steps mixed).
//
// Schedule invariance: a token's logits are bit-identical however its sequence was fed (whole
// prompt, chunks of any size, one token at a time), whatever else shares the batch and however
// many threads run. Every reduction runs in one fixed order per token: matmul rows are
// computed whole by one thread (kernels/cpu/ternary_matmul.h), attention reduces over keys in
// position order, and the GatedDeltaNet recurrence runs token by token in prefill as in decode.
#ifndef WALSH_WORKER_ENGINE_ENGINE_H_
#define WALSH_WORKER_ENGINE_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/engine/kv_page_pool.h"
#include "worker/engine/model.h"
#include "worker/engine/state_slot_pool.h"
#include "worker/parallel/cpu_communicator.h"
#include "worker/parallel/shard_plan.h"

namespace walsh {

struct EngineOptions {
  int threads = 1;
  int64_t kv_cache_bytes = int64_t{256} << 20;  // pool of KV pages for the attention layers
  int64_t state_bytes = int64_t{256} << 20;     // pool of GatedDeltaNet state slots
  int64_t kv_pages = 0;     // if > 0: this many pages, whatever kv_cache_bytes says
  int64_t state_slots = 0;  // if > 0: this many slots, whatever state_bytes says
  int64_t page_size = 16;   // positions per KV page
  int64_t max_context = 0;  // 0: the model's context_length
  // Quantize activations to int8 before the ternary dot products (as llama.cpp does). Off is
  // a test/debug mode: fp32 activations against the decoded weights.
  bool quantize_activations = true;
  std::optional<CpuIsa> isa;  // default: the best this CPU supports
  // Tensor parallelism over in-process CPU ranks (one thread each): every projection is split
  // by output rows per worker/parallel/shard_plan.h, and the parts are all-gathered.
  int tp = 1;
  std::chrono::milliseconds collective_timeout{10000};
  int debug_stall_rank = -1;  // tests: this rank stops answering after 200 collectives
};

using SequenceId = int64_t;

struct SequenceInput {
  SequenceId id = 0;
  std::vector<int32_t> tokens;  // appended at the sequence's current length
  bool all_logits = false;      // logits for every new token; otherwise for the last one only
};

struct ForwardResult {
  struct Row {
    SequenceId id;
    int64_t position;  // position of the token whose next-token logits these are
  };
  int64_t vocab = 0;
  std::vector<Row> rows;
  std::vector<float> logits;  // rows.size() x vocab

  const float* RowLogits(size_t i) const { return logits.data() + i * vocab; }
};

struct EngineStats {
  int64_t kv_pages_used, kv_pages_total, state_slots_used, state_slots_total;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<Model> model,
                                                        const EngineOptions& options);

  const Model& model() const { return *model_; }
  CpuIsa isa() const { return isa_; }
  int64_t max_context() const { return max_context_; }
  int64_t page_size() const { return kv_.page_size(); }

  // A new empty sequence; RESOURCE_EXHAUSTED when no state slot is free.
  absl::StatusOr<SequenceId> AddSequence();
  // Frees the sequence's KV pages and state slot.
  absl::Status RemoveSequence(SequenceId id);
  absl::StatusOr<int64_t> SequenceLength(SequenceId id) const;

  // Runs one step over the batch. Validates everything first: on error (unknown or repeated
  // sequence, token out of range, context or KV pages exhausted) no sequence changes.
  absl::StatusOr<ForwardResult> Forward(const std::vector<SequenceInput>& batch);

  EngineStats Stats() const;

  // An activation tagged with the transform applied to it; a projection runs only on the
  // transform its weights were folded with (the fork's graph check, FORMAT.md §6).
  enum class Transform { kPlain, kRotated, kPermutedRotated };
  static Transform RequiredTransform(const Projection& p);
  absl::Status CheckTransform(const Projection& p, Transform applied) const;
  int tp() const { return options_.tp; }
  // A collective failed (a rank stalled or died): the group is broken and every later step
  // fails; the server reports NOT_SERVING.
  bool broken() const { return comm_ != nullptr && comm_->broken(); }

 private:
  struct Sequence {
    int64_t length = 0;
    int32_t slot = -1;
    std::vector<int32_t> pages;
  };
  class ProjectionInput;
  struct Scratch;
  class TpRanks;

  Engine(std::unique_ptr<Model> model, const EngineOptions& options, int64_t pages, int64_t slots);

  absl::Status Project(const Projection& p, ProjectionInput& in, float* y);
  void Embed(int32_t token, float* out) const;
  absl::Status AttentionLayer(const LayerWeights& L, const std::vector<int64_t>& seq_of_token,
                              const std::vector<int64_t>& pos_of_token,
                              const std::vector<Sequence*>& seqs, const float* a, float* mixer,
                              Scratch& s);
  absl::Status GdnLayer(const LayerWeights& L, const std::vector<int64_t>& seq_of_token,
                        const std::vector<Sequence*>& seqs, const float* a, float* mixer,
                        Scratch& s);

  std::unique_ptr<Model> model_;
  EngineOptions options_;
  CpuIsa isa_;
  int64_t max_context_;
  ThreadPool pool_;
  KvPagePool kv_;
  StateSlotPool states_;
  absl::flat_hash_map<SequenceId, Sequence> sequences_;
  SequenceId next_id_ = 1;
  std::unique_ptr<CpuCommunicator> comm_;
  std::unique_ptr<ShardPlan> plan_;
  std::unique_ptr<TpRanks> ranks_;

 public:
  ~Engine();
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_ENGINE_H_
