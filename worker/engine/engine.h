// The inference engine: the bookkeeping around the qwen35 forward pass (qwen35_graph.h) over a
// batch of sequences that each bring any number of new tokens (prefill chunks and decode steps
// mixed). The engine is a runner: it validates a step and runs it on the page tables, slots and
// planes it is handed, and makes the cache copies it is asked for. Which page and slot is whose
// is the KV manager's (kv_manager.h), which its owner (the scheduler, or a solo runner for the
// tools and tests: solo_runner.h) plans from the room the engine reports and has the engine
// allocate; sequence_runner.h ties the two together. The graph runs on a backend (backend.h: the
// CPU, or CUDA) that owns the device memory.
//
// Schedule invariance: a token's logits are bit-identical however its sequence was fed (whole
// prompt, chunks of any size, one token at a time), whatever else shares the batch and however
// many threads run. Every reduction runs in one fixed order per token: matmul rows are
// computed whole by one thread (kernels/cpu/ternary_matmul.h), attention reduces over keys in
// position order, and the GatedDeltaNet recurrence runs token by token in prefill as in decode.
// The per-token float ops are shared by every backend (kernels/token_ops.h).
#ifndef WALSH_WORKER_ENGINE_ENGINE_H_
#define WALSH_WORKER_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/engine/backend.h"
#include "worker/engine/backend_group.h"
#include "worker/engine/cache_plan.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/model.h"
#include "worker/engine/qwen35_graph.h"
#include "worker/engine/rank_command.h"
#include "worker/engine/step_input.h"
#include "worker/parallel/shard_plan.h"

namespace walsh {

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

class Engine {
 public:
  // With a process group, this engine is its leader (rank 0): it mirrors every operation on its
  // backend to the followers (rank_follower.h) before running it.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<Model> model,
                                                        const EngineOptions& options,
                                                        const EngineFaults& faults = {},
                                                        ProcessGroup process_group = {});
  ~Engine();

  const Model& model() const { return *model_; }
  const Backend& backend(int rank = 0) const { return group_.backend(rank); }
  // "cuda", or the CPU kernels' ISA ("avx2", "scalar", "avx512vnni", "avx512vbmi").
  std::string kernels() const { return group_.kernels(); }
  // Device memory of all ranks' backends together, or of one rank (bytes; the CPU reports its
  // caches only).
  BackendMemory Memory() const;
  BackendMemory RankMemory(int rank) const { return group_.backend(rank).Memory(); }
  // The ranks this process holds (all tp of them, or the leader's one of a group across
  // processes): RankMemory's and backend()'s indices.
  int local_ranks() const { return group_.size(); }
  int64_t max_context() const { return max_context_; }
  // How KV pages store keys and values.
  KvCacheDtype kv_cache_dtype() const { return kv_dtype_; }

  // The caches. What a page of `page_size` positions and a state slot take, all ranks together
  // (every rank holds its heads' share of each), and the bytes the tightest rank this process
  // holds can give them: what the KV manager is planned from.
  CacheUnits CacheUnitsFor(int64_t page_size) const;
  int64_t CacheRoom() const;
  // Allocates the planned pages and slots (snapshot slots included) on every rank, once.
  absl::Status AllocateCaches(const CachePlan& plan, int64_t page_size);
  // Makes the copy on every rank (step_input.h).
  absl::Status Copy(const CacheCopy& copy);

  // Refuses a step whose inputs are malformed, whatever memory it is given: a sequence that
  // brings no tokens, a token out of range, image inputs malformed or not taken by the backend,
  // or a sequence that would pass the context limit from `lengths[i]` tokens.
  absl::Status CheckStep(const std::vector<SequenceInput>& batch,
                         absl::Span<const int64_t> lengths) const;
  // Runs one step over the batch, each entry on its memory (`caches[i]`, whose pages cover its
  // new tokens). Validates everything first (CheckStep, and the memory against the allocation):
  // on error nothing ran. A failure while running leaves layers advanced: INTERNAL, or
  // UNAVAILABLE (a broken tensor-parallel group) or DEADLINE_EXCEEDED (a stalled rank).
  absl::StatusOr<ForwardResult> Forward(const std::vector<SequenceInput>& batch,
                                        const std::vector<SequenceCache>& caches);

  // A projection runs only on the transform its weights were folded with (the fork's graph
  // check, docs/format.md §6): qwen35_graph.h.
  using Transform = ::walsh::Transform;
  using InputTag = Qwen35Graph::InputTag;
  static Transform RequiredTransform(const Projection& p) {
    return Qwen35Graph::RequiredTransform(p);
  }
  static absl::Status CheckInput(const Projection& p, const InputTag& tag, const int8_t* signs) {
    return Qwen35Graph::CheckInput(p, tag, signs);
  }
  int tp() const { return options_.tp; }
  // A collective failed (a rank stalled or died): the group is broken and every later step
  // fails; the server reports NOT_SERVING.
  bool broken() const { return group_.broken(); }
  // The tensor-parallel plan (one rank when tp is 1).
  const ShardPlan& shard_plan() const { return *plan_; }

 private:
  absl::Status CheckImageInputs(const SequenceInput& in) const;
  absl::Status CheckCaches(const std::vector<SequenceInput>& batch,
                           const std::vector<SequenceCache>& caches) const;
  // Sends the command to the ranks other processes hold (none: nothing to do).
  absl::Status Mirror(const RankCommand& command);
  absl::Status ForEachRank(const std::function<absl::Status(Backend&)>& op);
  Engine(std::unique_ptr<Model> model, const EngineOptions& options, BackendGroup group);

  std::unique_ptr<Model> model_;
  EngineOptions options_;
  BackendGroup group_;
  int64_t max_context_;
  KvCacheDtype kv_dtype_ = KvCacheDtype::kFp16;
  CachePlan caches_;  // allocated; page_size_ 0 until then
  int64_t page_size_ = 0;
  std::unique_ptr<ShardPlan> plan_;
  std::vector<std::unique_ptr<Qwen35Graph>> graphs_;  // one per rank, over group_'s backends
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_ENGINE_H_
