// Drafting with a smaller model of the same vocabulary (--speculative draft:FILE,
// docs/speculative_decoding.md). The draft model runs greedily in an engine of its own, on the
// same backend, with a sequence per request. Each step it catches up with the tokens the
// request kept since its last draft (the accepted drafts and the target's own token), all
// requests in one batch of at most the target's step budget (a long catch-up such as the
// prompt takes several steps, drafting nothing until it is done), then drafts one
// token per step, all requests batched again. Before its second draft token a sequence takes a
// checkpoint (SequenceRunner::Checkpoint), so the drafts the target rejects are undone at the next
// step by restoring it, with no replay. A request the draft engine has no room for drafts nothing.
#ifndef WALSH_WORKER_SPECULATIVE_DRAFT_MODEL_DRAFTER_H_
#define WALSH_WORKER_SPECULATIVE_DRAFT_MODEL_DRAFTER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "worker/engine/solo_runner.h"
#include "worker/speculative/drafter.h"

namespace walsh {

// Refuses a draft model whose token ids do not mean what the target's mean: a different
// tokenizer.ggml.tokens array (the message gives both vocabularies' sizes and hashes and the
// first token that differs) or a different vocab_size.
absl::Status CheckSameVocabulary(const Model& target, const Model& draft);

class DraftModelDrafter final : public Drafter {
 public:
  // `draft` runs the draft model without prefix caching. Refuses a vocabulary that
  // is not the target's, or a context shorter than the target's `context`. Runs a canary step.
  // A step's catch-ups feed at most `max_step_tokens` tokens, all requests together.
  static absl::StatusOr<std::unique_ptr<DraftModelDrafter>> Create(
      std::unique_ptr<SoloRunner> draft, const Model& target, int64_t context,
      int64_t max_step_tokens);

  std::vector<std::vector<int32_t>> Draft(absl::Span<const DraftRequest> requests) override;
  void Forget(uint64_t key) override;

  const SoloRunner& runner() const { return *draft_; }
  int64_t sequences() const { return static_cast<int64_t>(tracks_.size()); }
  // Tokens the draft engine has been fed, catch-ups and drafts together.
  int64_t tokens_fed() const { return tokens_fed_; }

 private:
  // A request's sequence in the draft engine: the tokens it was fed and the argmax after them,
  // and while it drafts, its checkpoint's length (-1: none) and the argmax there.
  struct Track {
    SequenceId sequence = 0;
    std::vector<int32_t> fed;
    int32_t next = -1;
    int64_t checkpoint = -1;
    int32_t checkpoint_next = -1;
  };
  DraftModelDrafter(std::unique_ptr<SoloRunner> draft, int64_t max_step_tokens)
      : draft_(std::move(draft)), max_step_tokens_(max_step_tokens) {}
  // The request's track, its fed tokens a prefix of the request's: the drafts the target
  // rejected are undone; a track that went astray starts again empty.
  absl::StatusOr<Track*> Sync(const DraftRequest& request);
  // One step of the draft engine over `batch` (members[j] is batch[j]'s request; its pages
  // reserved): the tracks take the tokens and the argmax after them. False when empty or failed
  // (the members are forgotten).
  bool Run(absl::Span<const DraftRequest> requests, const std::vector<SequenceInput>& batch,
           const std::vector<size_t>& members);

  std::unique_ptr<SoloRunner> draft_;
  int64_t max_step_tokens_;
  absl::flat_hash_map<uint64_t, Track> tracks_;
  int64_t tokens_fed_ = 0;
};

}  // namespace walsh

#endif  // WALSH_WORKER_SPECULATIVE_DRAFT_MODEL_DRAFTER_H_
