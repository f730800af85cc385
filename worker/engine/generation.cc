#include "worker/engine/generation.h"

namespace walsh {

Generation::Generation(const Tokenizer* tokenizer, GenerationRequest request)
    : request_(std::move(request)), stop_(request_.stop) {
  if (tokenizer != nullptr) detokenizer_.emplace(*tokenizer);
}

void Generation::Replay(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    output_.push_back(id);
    const std::string text = detokenizer_ ? detokenizer_->Add(id) : std::string();
    (void)stop_.Add(id, text);
  }
}

GeneratedToken Generation::Advance(const float* logits, int64_t vocab) {
  GeneratedToken t;
  t.index = static_cast<int64_t>(output_.size());
  const SampledToken s =
      Sample(logits, vocab, request_.sampling, request_.prompt, output_, t.index);
  t.id = s.id;
  t.logprob = s.logprob;
  t.top_logprobs = s.top;
  output_.push_back(s.id);
  std::string text = detokenizer_ ? detokenizer_->Add(s.id) : std::string();
  StopChecker::Step step = stop_.Add(s.id, text);
  t.text = std::move(step.text);
  t.finish = step.finish;
  t.matched_stop = std::move(step.matched);
  if (t.finish == FinishReason::kLength && detokenizer_) t.text += detokenizer_->Flush();
  finished_ = t.finish != FinishReason::kNone;
  return t;
}

}  // namespace walsh
