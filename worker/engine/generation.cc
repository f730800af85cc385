#include "worker/engine/generation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace walsh {

Generation::Generation(const Tokenizer* tokenizer, GenerationRequest request)
    : request_(std::move(request)), stop_(request_.stop) {
  if (tokenizer != nullptr) detokenizer_.emplace(*tokenizer);
  if (request_.constraint) matcher_.emplace(request_.constraint);
}

Generation::~Generation() { DropPrefetchedMask(); }

void Generation::DropPrefetchedMask() {
  if (!prefetched_) return;
  prefetched_->Cancel();
  prefetched_.reset();
}

void Generation::PrefetchMask(MaskPrefetcher& prefetcher, std::function<void()> on_ready) {
  if (!matcher_ || prefetched_ || finished_ || exhausted_) return;
  prefetched_ =
      prefetcher.Start(&*matcher_, request_.mask_limits, request_.cancelled, std::move(on_ready));
}

bool Generation::MaskReady() const { return !prefetched_ || prefetched_->Ready(); }

absl::StatusOr<const std::vector<uint64_t>*> Generation::ConstraintMask(int64_t vocab,
                                                                        MaskBudget& budget) {
  if (!matcher_) return nullptr;
  if (prefetched_) {
    absl::StatusOr<std::vector<uint64_t>> taken = prefetched_->Take();
    prefetched_.reset();
    if (!taken.ok()) return taken.status();
    allowed_ = *std::move(taken);
  } else if (absl::Status s = matcher_->FillMask(allowed_, budget); !s.ok()) {
    return s;
  }
  allowed_.resize((vocab + 63) / 64, 0);
  if (matcher_->CanEnd()) AllowEnd(vocab);
  if (std::all_of(allowed_.begin(), allowed_.end(), [](uint64_t w) { return w == 0; })) {
    // No token continues the state (a byte no token spells, or a bound of the automaton hit):
    // the output ends here, the longest the constraint allowed.
    AllowEnd(vocab);
    exhausted_ = true;
  }
  return &allowed_;
}

void Generation::AllowEnd(int64_t vocab) {
  for (const std::vector<int32_t>* ids : {&request_.stop.eos_ids, &request_.stop.stop_ids}) {
    for (int32_t id : *ids) {
      if (id >= 0 && id < vocab) allowed_[id >> 6] |= 1ull << (id & 63);
    }
  }
}

absl::StatusOr<bool> Generation::Constrain(int32_t id, MaskBudget& budget) {
  if (!matcher_) return true;
  const auto& end = request_.stop;
  if (std::find(end.eos_ids.begin(), end.eos_ids.end(), id) != end.eos_ids.end() ||
      std::find(end.stop_ids.begin(), end.stop_ids.end(), id) != end.stop_ids.end()) {
    return matcher_->CanEnd();
  }
  const bool accepted = matcher_->AcceptToken(id, budget);
  if (budget.spent()) return budget.status();
  return accepted;
}

absl::Status Generation::Replay(const std::vector<int32_t>& ids) {
  DropPrefetchedMask();  // the matcher is about to move on
  for (int32_t id : ids) {
    MaskBudget budget(request_.mask_limits, request_.cancelled);
    absl::StatusOr<bool> allowed = Constrain(id, budget);
    if (!allowed.ok()) return allowed.status();
    if (!*allowed) {
      return absl::InvalidArgumentError(absl::StrCat("emitted_ids[", output_.size(), "]: token ",
                                                     id, " is not allowed by the constraint"));
    }
    output_.push_back(id);
    const std::string text = detokenizer_ ? detokenizer_->Add(id) : std::string();
    (void)stop_.Add(id, text);
  }
  return absl::OkStatus();
}

absl::StatusOr<GeneratedToken> Generation::Advance(const float* logits, int64_t vocab) {
  GeneratedToken t;
  t.index = static_cast<int64_t>(output_.size());
  // One budget for the token's constraint work on this thread: its mask when none was
  // prefetched, and every advance the sampler tries (a refused draw tries again). Without a
  // constraint, none (its deadline would read the clock for nothing).
  MaskBudget budget =
      matcher_ ? MaskBudget(request_.mask_limits, request_.cancelled) : MaskBudget();
  absl::StatusOr<const std::vector<uint64_t>*> masked = ConstraintMask(vocab, budget);
  if (!masked.ok()) return masked.status();
  const std::vector<uint64_t>* mask = *masked;
  SampledToken s;
  while (true) {
    s = Sample(logits, vocab, request_.sampling, request_.prompt, output_, t.index, mask);
    if (mask == nullptr || exhausted_) break;
    absl::StatusOr<bool> allowed = Constrain(s.id, budget);
    if (!allowed.ok()) return allowed.status();
    if (*allowed) break;
    // The mask allowed a token the automaton then refused (a stack past its bounds): take it
    // out and draw again, so the constraint's state always holds every output.
    allowed_[s.id >> 6] &= ~(1ull << (s.id & 63));
    if (std::all_of(allowed_.begin(), allowed_.end(), [](uint64_t w) { return w == 0; })) {
      AllowEnd(vocab);
      exhausted_ = true;
    }
  }
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
