// One request's generation: samples from logits, detokenizes incrementally and applies the stop
// rules. The engine runs the forward passes; this keeps the per-request state between them, so
// the same object serves walsh-run and the worker's scheduler.
#ifndef WALSH_WORKER_ENGINE_GENERATION_H_
#define WALSH_WORKER_ENGINE_GENERATION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "constraint/compiled_grammar.h"
#include "constraint/grammar_matcher.h"
#include "constraint/mask_budget.h"
#include "constraint/mask_prefetcher.h"
#include "worker/engine/detokenizer.h"
#include "worker/engine/sampler.h"
#include "worker/engine/stop_checker.h"
#include "worker/model/tokenizer.h"

namespace walsh {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  StopConfig stop;
  // Structured output (docs/structured_output.md): every output token keeps the text a prefix
  // of the grammar's language, and EOS or a stop token comes only where the text is complete.
  std::shared_ptr<const CompiledGrammar> constraint;
  // What the constraint's work for one token may cost (its mask, or its advance past the token),
  // and the request's cancel flag, which stops that work (optional; the caller's, and outlives
  // the generation).
  MaskLimits mask_limits;
  const std::atomic<bool>* cancelled = nullptr;
};

struct GeneratedToken {
  int32_t id = 0;
  int64_t index = 0;  // position among the outputs
  std::string text;   // the text that may be streamed after this token
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top_logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string matched_stop;
};

class Generation {
 public:
  // `tokenizer` may be null: ids only, no text and no stop strings.
  Generation(const Tokenizer* tokenizer, GenerationRequest request);
  ~Generation();  // waits for a mask a pool thread is computing
  // Fixed in place: a prefetched mask's job points into it.
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  const GenerationRequest& request() const { return request_; }
  const std::vector<int32_t>& output() const { return output_; }
  bool finished() const { return finished_; }

  // Feeds outputs another worker already produced and sent (a resumed stream): the detokenizer,
  // stop rules and constraint advance, their text is dropped, and sampling continues at the
  // next index. Refuses, naming the index, an output the constraint does not allow, and ends
  // with the budget's status when the constraint's work for one ran past it.
  absl::Status Replay(const std::vector<int32_t>& ids);
  // Starts the next token's constraint mask on `prefetcher`'s threads, to be computed while
  // the forward pass that yields its logits runs; Advance takes it. `on_ready` (optional) is
  // called from the computing thread once it is ready. Nothing without a constraint, or when
  // one is already started.
  void PrefetchMask(MaskPrefetcher& prefetcher, std::function<void()> on_ready = nullptr);
  // Whether Advance would find its mask without waiting for another thread: no constraint, no
  // mask started, or the started one done.
  bool MaskReady() const;
  // Drops a prefetched mask that will not be taken (the pass failed): a queued one at once, a
  // running one when it ends.
  void DropPrefetchedMask();
  // Draws the next token from the logits of the last position. Fails (and the generation must
  // end) when the constraint's work for the token ran past its budget (RESOURCE_EXHAUSTED
  // naming the bound) or the request was cancelled during it.
  absl::StatusOr<GeneratedToken> Advance(const float* logits, int64_t vocab);

 private:
  // The tokens the constraint allows next (null without one), EOS and stop ids included where
  // the text may end.
  // An inline mask (none prefetched) is charged to `budget`.
  absl::StatusOr<const std::vector<uint64_t>*> ConstraintMask(int64_t vocab, MaskBudget& budget);
  // Advances the constraint past an output token, charged to `budget`: whether it may.
  absl::StatusOr<bool> Constrain(int32_t id, MaskBudget& budget);
  void AllowEnd(int64_t vocab);  // EOS and the stop ids into the mask

  GenerationRequest request_;
  std::optional<StreamingDetokenizer> detokenizer_;
  StopChecker stop_;
  std::optional<GrammarMatcher> matcher_;
  std::vector<uint64_t> allowed_;        // the constraint's mask for the next token
  std::shared_ptr<MaskJob> prefetched_;  // computing the next mask from matcher_'s state
  bool exhausted_ = false;               // no token could continue it: the output ends
  std::vector<int32_t> output_;
  bool finished_ = false;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_GENERATION_H_
