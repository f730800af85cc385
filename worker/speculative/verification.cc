#include "worker/speculative/verification.h"

#include <algorithm>

namespace walsh {

std::vector<int32_t> TrimDraft(std::vector<int32_t> proposed, int64_t vocab, int64_t max_tokens) {
  auto end = std::find_if(proposed.begin(), proposed.end(),
                          [&](int32_t t) { return t < 0 || t >= vocab; });
  proposed.erase(end, proposed.end());
  proposed.resize(std::min(proposed.size(), static_cast<size_t>(std::max<int64_t>(max_tokens, 0))));
  return proposed;
}

std::vector<int64_t> ShareDraftBudget(int64_t budget, const std::vector<bool>& decode,
                                      std::vector<std::vector<int32_t>>& drafts) {
  for (bool d : decode) budget -= d ? 1 : 0;
  std::vector<int64_t> kept(drafts.size(), 0);
  for (size_t i = 0; i < drafts.size(); ++i) {
    const int64_t n = std::clamp<int64_t>(budget, 0, static_cast<int64_t>(drafts[i].size()));
    drafts[i].resize(static_cast<size_t>(n));
    budget -= n;
    kept[i] = n;
  }
  return kept;
}

absl::Status SampleWhileDraftsHold(Generation& generation, const float* logits, int64_t vocab,
                                   size_t rows, const std::vector<int32_t>& drafts,
                                   std::vector<GeneratedToken>* sampled) {
  for (size_t j = 0; j < rows; ++j) {
    absl::StatusOr<GeneratedToken> drawn = generation.Advance(logits + j * vocab, vocab);
    if (!drawn.ok()) return drawn.status();
    sampled->push_back(*std::move(drawn));
    const GeneratedToken& t = sampled->back();
    if (t.finish != FinishReason::kNone || j >= drafts.size() || t.id != drafts[j]) break;
  }
  return absl::OkStatus();
}

size_t AcceptedDrafts(const std::vector<GeneratedToken>& sampled,
                      const std::vector<int32_t>& drafts) {
  if (sampled.empty()) return 0;
  const size_t last = sampled.size() - 1;
  const bool last_matched = last < drafts.size() && sampled[last].id == drafts[last];
  return last + (last_matched ? 1 : 0);
}

}  // namespace walsh
