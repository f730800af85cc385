#include "worker/speculative/draft_model_drafter.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/ops.h"
#include "worker/model/gguf_keys.h"

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

}  // namespace

absl::Status CheckSameVocabulary(const Model& target, const Model& draft) {
  if (draft.config().vocab_size != target.config().vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the draft model's vocab_size is ",
                                                   draft.config().vocab_size, ", the target's ",
                                                   target.config().vocab_size));
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> want,
                   target.gguf().GetStringArray(gguf_keys::kTokenizerGgmlTokens));
  ASSIGN_OR_RETURN(const std::vector<std::string> have,
                   draft.gguf().GetStringArray(gguf_keys::kTokenizerGgmlTokens));
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
    std::unique_ptr<SoloRunner> draft, const Model& target, int64_t context,
    int64_t max_step_tokens) {
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
  if (const absl::Status ran = draft->Canary(); !ran.ok()) {
    return absl::InternalError(absl::StrCat("the draft model's canary step: ", ran.message()));
  }
  return std::unique_ptr<DraftModelDrafter>(
      new DraftModelDrafter(std::move(draft), max_step_tokens));
}

absl::StatusOr<DraftModelDrafter::Track*> DraftModelDrafter::Sync(const DraftRequest& request) {
  if (auto it = tracks_.find(request.key); it != tracks_.end()) {
    Track& track = it->second;
    // A live request's tokens only grow: only the drafts fed since the checkpoint can differ.
    const size_t from =
        std::min({track.checkpoint >= 0 ? static_cast<size_t>(track.checkpoint) : track.fed.size(),
                  track.fed.size(), request.tokens.size()});
    const size_t common =
        static_cast<size_t>(std::mismatch(track.fed.begin() + from, track.fed.end(),
                                          request.tokens.begin() + from, request.tokens.end())
                                .first -
                            track.fed.begin());
    absl::Status s;
    if (track.checkpoint >= 0) {
      // Every draft fed was kept: keep them. Else undo the drafts back to the checkpoint.
      if (common == track.fed.size()) {
        s = draft_->DropCheckpoint(track.sequence);
      } else if (common >= static_cast<size_t>(track.checkpoint)) {
        s = draft_->RestoreCheckpoint(track.sequence);
        track.fed.resize(static_cast<size_t>(track.checkpoint));
        track.next = track.checkpoint_next;
      } else {
        s = absl::FailedPreconditionError("the request's tokens changed before the checkpoint");
      }
      track.checkpoint = -1;
    }
    if (s.ok() && common < track.fed.size()) {
      s = absl::FailedPreconditionError("the request's tokens are not the draft sequence's");
    }
    if (s.ok()) return &track;
    Forget(request.key);  // starts again from the request's tokens
  }
  ASSIGN_OR_RETURN(const SequenceId id, draft_->AddSequence());
  return &tracks_.emplace(request.key, Track{.sequence = id}).first->second;
}

std::vector<std::vector<int32_t>> DraftModelDrafter::Draft(
    absl::Span<const DraftRequest> requests) {
  std::vector<std::vector<int32_t>> out(requests.size());
  // Catch up: each request feeds what it kept since its last draft, all of them together at
  // most max_step_tokens_, the shortest catch-ups first (a long one, such as a prompt, goes one
  // chunk per step, and the request drafts once it has caught up). A request with no room in
  // the draft engine drafts nothing this step.
  std::vector<std::pair<size_t, size_t>> behind;  // (tokens to feed, request)
  std::vector<size_t> caught_up;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].max_tokens < 1) continue;
    absl::StatusOr<Track*> track = Sync(requests[i]);
    if (!track.ok()) continue;
    const size_t missing = requests[i].tokens.size() - (*track)->fed.size();
    if (missing == 0) {
      caught_up.push_back(i);
    } else {
      behind.emplace_back(missing, i);
    }
  }
  std::sort(behind.begin(), behind.end());
  std::vector<SequenceInput> feed;
  std::vector<size_t> feeding;  // feed[j] is requests[feeding[j]]'s
  size_t budget = static_cast<size_t>(max_step_tokens_);
  for (const auto& [missing, i] : behind) {
    const size_t n = std::min(missing, budget);
    if (n == 0) break;
    const Track& track = tracks_.at(requests[i].key);
    const auto from = requests[i].tokens.begin() + static_cast<ptrdiff_t>(track.fed.size());
    SequenceInput input{track.sequence, std::vector<int32_t>(from, from + n)};
    if (!draft_->kv().Reserve({input}).ok()) continue;
    budget -= n;
    feed.push_back(std::move(input));
    feeding.push_back(i);
  }
  if (!Run(requests, feed, feeding)) feeding.clear();
  for (size_t i : feeding) {
    if (tracks_.at(requests[i].key).fed.size() == requests[i].tokens.size()) caught_up.push_back(i);
  }
  // Draft: the first token is the argmax after the request's tokens; then one token per step,
  // all requests batched, after a checkpoint that lets the next step undo them.
  std::vector<size_t> drafting;
  for (size_t i : caught_up) {
    out[i].push_back(tracks_.at(requests[i].key).next);
    drafting.push_back(i);
  }
  while (!drafting.empty()) {
    std::vector<SequenceInput> step;
    std::vector<size_t> stepping;
    for (size_t i : drafting) {
      if (static_cast<int64_t>(out[i].size()) >= requests[i].max_tokens) continue;
      Track& track = tracks_.at(requests[i].key);
      if (track.checkpoint < 0) {
        if (!draft_->Checkpoint(track.sequence).ok()) continue;  // no slot: one draft token
        track.checkpoint = static_cast<int64_t>(track.fed.size());
        track.checkpoint_next = track.next;
      }
      SequenceInput input{track.sequence, {out[i].back()}};
      if (!draft_->kv().Reserve({input}).ok()) continue;
      step.push_back(std::move(input));
      stepping.push_back(i);
    }
    if (!Run(requests, step, stepping)) break;
    for (size_t i : stepping) out[i].push_back(tracks_.at(requests[i].key).next);
    drafting = std::move(stepping);
  }
  return out;
}

bool DraftModelDrafter::Run(absl::Span<const DraftRequest> requests,
                            const std::vector<SequenceInput>& batch,
                            const std::vector<size_t>& members) {
  if (batch.empty()) return false;
  absl::StatusOr<ForwardResult> result = draft_->Forward(batch);
  if (!result.ok()) {
    // Its pages were reserved, so this is no shortage: the sequences are not to be trusted.
    for (size_t i : members) Forget(requests[i].key);
    return false;
  }
  for (size_t j = 0; j < batch.size(); ++j) {
    Track& track = tracks_.at(requests[members[j]].key);
    track.fed.insert(track.fed.end(), batch[j].tokens.begin(), batch[j].tokens.end());
    track.next = static_cast<int32_t>(Argmax(result->RowLogits(j), result->vocab));
    tokens_fed_ += static_cast<int64_t>(batch[j].tokens.size());
  }
  return true;
}

void DraftModelDrafter::Forget(uint64_t key) {
  auto it = tracks_.find(key);
  if (it == tracks_.end()) return;
  (void)draft_->RemoveSequence(it->second.sequence);
  tracks_.erase(it);
}

}  // namespace walsh
