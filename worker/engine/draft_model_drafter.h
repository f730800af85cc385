// Drafting with a smaller model of the same vocabulary (--speculative draft:FILE,
// docs/speculative_decoding.md). The draft model runs greedily in an engine of its own, on the
// same backend, with a sequence per request. Each step it catches up with the tokens the
// request kept since its last draft (the accepted drafts and the target's own token), all
// requests in one batch, then drafts one token per step, all requests batched again. Before its
// second draft token a sequence takes a checkpoint (Engine::Checkpoint), so the drafts the
// target rejects are undone at the next step by restoring it, with no replay.
#ifndef WALSH_WORKER_ENGINE_DRAFT_MODEL_DRAFTER_H_
#define WALSH_WORKER_ENGINE_DRAFT_MODEL_DRAFTER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "worker/engine/drafter.h"
#include "worker/engine/engine.h"

namespace walsh {

// Refuses a draft model whose token ids do not mean what the target's mean: a different
// tokenizer.ggml.tokens array (the message gives both vocabularies' sizes and hashes and the
// first token that differs) or a different vocab_size.
absl::Status CheckSameVocabulary(const Model& target, const Model& draft);

class DraftModelDrafter final : public Drafter {
 public:
  // `draft` is an engine without prefix caching over the draft model. Refuses a vocabulary that
  // is not the target's, or a context shorter than the target's `context`. Runs a canary step.
  // Catch-up steps feed at most `max_step_tokens` tokens per sequence.
  static absl::StatusOr<std::unique_ptr<DraftModelDrafter>> Create(std::unique_ptr<Engine> draft,
                                                                   const Model& target,
                                                                   int64_t context,
                                                                   int64_t max_step_tokens);

  std::vector<std::vector<int32_t>> Draft(absl::Span<const DraftRequest> requests) override;
  void Forget(uint64_t key) override;

  const Engine& engine() const { return *engine_; }
  int64_t sequences() const { return static_cast<int64_t>(tracks_.size()); }

 private:
  // A request's sequence in the draft engine: the tokens it was fed, and the length of its
  // checkpoint (-1: none).
  struct Track {
    SequenceId sequence = 0;
    std::vector<int32_t> fed;
    int64_t checkpoint = -1;
  };
  DraftModelDrafter(std::unique_ptr<Engine> engine, int64_t max_step_tokens)
      : engine_(std::move(engine)), max_step_tokens_(max_step_tokens) {}
  // The request's track, in step with all its tokens but those returned in `tail` (at least
  // one): drafts the target rejected are undone, a long catch-up is fed in chunks.
  absl::StatusOr<Track*> CatchUp(const DraftRequest& request, std::vector<int32_t>* tail);

  std::unique_ptr<Engine> engine_;
  int64_t max_step_tokens_;
  absl::flat_hash_map<uint64_t, Track> tracks_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_DRAFT_MODEL_DRAFTER_H_
