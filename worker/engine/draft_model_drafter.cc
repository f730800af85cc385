#include "worker/engine/draft_model_drafter.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace walsh {
namespace {

// FNV-1a over the tokens' bytes, each ended by a 0 byte: names a vocabulary in messages.
uint64_t VocabularyHash(const std::vector<std::string>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (const std::string& t : tokens) {
    for (unsigned char c : t) h = (h ^ c) * 1099511628211ull;
    h *= 1099511628211ull;
  }
  return h;
}

int32_t Argmax(const float* logits, int64_t n) {
  return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
}

}  // namespace

absl::Status CheckSameVocabulary(const Model& target, const Model& draft) {
  if (draft.config().vocab_size != target.config().vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the draft model's vocab_size is ",
                                                   draft.config().vocab_size, ", the target's ",
                                                   target.config().vocab_size));
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> want,
                   target.gguf().GetStringArray("tokenizer.ggml.tokens"));
  ASSIGN_OR_RETURN(const std::vector<std::string> have,
                   draft.gguf().GetStringArray("tokenizer.ggml.tokens"));
  if (have == want) return absl::OkStatus();
  std::string difference;
  const auto [d, t] = std::mismatch(have.begin(), have.end(), want.begin(), want.end());
  if (d != have.end() && t != want.end()) {
    difference = absl::StrCat("token ", d - have.begin(), " is '", absl::CHexEscape(*d),
                              "' in the draft and '", absl::CHexEscape(*t), "' in the target");
  } else {
    difference = absl::StrCat("the shorter one ends at token ", std::min(have.size(), want.size()));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the draft model's tokenizer.ggml.tokens (", have.size(), " tokens, hash ",
      absl::Hex(VocabularyHash(have), absl::kZeroPad16), ") is not the target's (", want.size(),
      " tokens, hash ", absl::Hex(VocabularyHash(want), absl::kZeroPad16), "): ", difference));
}

absl::StatusOr<std::unique_ptr<DraftModelDrafter>> DraftModelDrafter::Create(
    std::unique_ptr<Engine> draft, const Model& target, int64_t context, int64_t max_step_tokens) {
  RETURN_IF_ERROR(CheckSameVocabulary(target, draft->model()));
  if (draft->prefix_caching()) {
    return absl::InvalidArgumentError("a draft model's engine runs without prefix caching");
  }
  if (draft->max_context() < context) {
    return absl::InvalidArgumentError(
        absl::StrCat("the draft model's context is ", draft->max_context(),
                     " tokens, shorter than the target's ", context, " (lower --max-context)"));
  }
  if (max_step_tokens < 1) return absl::InvalidArgumentError("max_step_tokens must be >= 1");
  ASSIGN_OR_RETURN(const SequenceId canary, draft->AddSequence());
  const absl::Status ran = draft->Forward({{canary, {0}}}).status();
  RETURN_IF_ERROR(draft->RemoveSequence(canary));
  if (!ran.ok())
    return absl::InternalError(absl::StrCat("the draft model's canary step: ", ran.message()));
  return std::unique_ptr<DraftModelDrafter>(
      new DraftModelDrafter(std::move(draft), max_step_tokens));
}

absl::StatusOr<DraftModelDrafter::Track*> DraftModelDrafter::CatchUp(const DraftRequest& q,
                                                                     std::vector<int32_t>* tail) {
  if (auto it = tracks_.find(q.key); it != tracks_.end()) {
    Track& t = it->second;
    const size_t common = static_cast<size_t>(
        std::mismatch(t.fed.begin(), t.fed.end(), q.tokens.begin(), q.tokens.end()).first -
        t.fed.begin());
    absl::Status s;
    if (t.checkpoint >= 0) {
      // Every fed draft was kept: keep them. Else undo the drafts back to the checkpoint.
      if (common == t.fed.size()) {
        s = engine_->DropCheckpoint(t.sequence);
      } else if (common >= static_cast<size_t>(t.checkpoint)) {
        s = engine_->RestoreCheckpoint(t.sequence);
        t.fed.resize(static_cast<size_t>(t.checkpoint));
      } else {
        s = absl::FailedPreconditionError("the request's tokens changed before the checkpoint");
      }
      t.checkpoint = -1;
    }
    if (s.ok() && (common < t.fed.size() || t.fed.size() >= q.tokens.size())) {
      s = absl::FailedPreconditionError("the request's tokens are not the draft sequence's");
    }
    if (!s.ok()) Forget(q.key);  // starts again from the request's tokens
  }
  auto it = tracks_.find(q.key);
  if (it == tracks_.end()) {
    ASSIGN_OR_RETURN(const SequenceId id, engine_->AddSequence());
    it = tracks_.emplace(q.key, Track{.sequence = id}).first;
  }
  Track& t = it->second;
  // A long catch-up (the prompt, the first time) in chunks, all but the last.
  while (static_cast<int64_t>(q.tokens.size() - t.fed.size()) > max_step_tokens_) {
    std::vector<int32_t> chunk(q.tokens.begin() + t.fed.size(),
                               q.tokens.begin() + t.fed.size() + max_step_tokens_);
    RETURN_IF_ERROR(engine_->Forward({{t.sequence, chunk}}).status());
    t.fed.insert(t.fed.end(), chunk.begin(), chunk.end());
  }
  tail->assign(q.tokens.begin() + t.fed.size(), q.tokens.end());
  return &t;
}

std::vector<std::vector<int32_t>> DraftModelDrafter::Draft(
    absl::Span<const DraftRequest> requests) {
  std::vector<std::vector<int32_t>> out(requests.size());
  std::vector<SequenceInput> batch;
  std::vector<size_t> who;  // batch[j] drafts for requests[who[j]]
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].max_tokens < 1) continue;
    std::vector<int32_t> tail;
    absl::StatusOr<Track*> t = CatchUp(requests[i], &tail);
    if (!t.ok()) {
      Forget(requests[i].key);
      continue;
    }
    batch.push_back({(*t)->sequence, std::move(tail)});
    who.push_back(i);
  }
  // The catch-up step gives every request its first draft token; then one token per step.
  while (!batch.empty()) {
    absl::StatusOr<ForwardResult> step = engine_->Forward(batch);
    if (!step.ok()) {
      for (size_t i : who) Forget(requests[i].key);  // the drafts so far are still guesses
      break;
    }
    std::vector<SequenceInput> next;
    std::vector<size_t> next_who;
    for (size_t j = 0; j < batch.size(); ++j) {
      const DraftRequest& q = requests[who[j]];
      Track& t = tracks_.at(q.key);
      t.fed.insert(t.fed.end(), batch[j].tokens.begin(), batch[j].tokens.end());
      out[who[j]].push_back(Argmax(step->RowLogits(j), step->vocab));
      if (static_cast<int64_t>(out[who[j]].size()) >= q.max_tokens) continue;
      if (t.checkpoint < 0) {
        if (!engine_->Checkpoint(t.sequence).ok()) continue;  // no slot: one draft token
        t.checkpoint = static_cast<int64_t>(t.fed.size());
      }
      next.push_back({t.sequence, {out[who[j]].back()}});
      next_who.push_back(who[j]);
    }
    batch = std::move(next);
    who = std::move(next_who);
  }
  return out;
}

void DraftModelDrafter::Forget(uint64_t key) {
  auto it = tracks_.find(key);
  if (it == tracks_.end()) return;
  (void)engine_->RemoveSequence(it->second.sequence);
  tracks_.erase(it);
}

}  // namespace walsh
