#include "worker/speculative/ngram_drafter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace walsh {

absl::Status ValidateNgramDraftOptions(const NgramDraftOptions& o) {
  if (o.min_match < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the n-gram drafter's minimum match is ", o.min_match, "; it must be >= 1"));
  }
  if (o.max_match < o.min_match) {
    return absl::InvalidArgumentError(absl::StrCat("the n-gram drafter's maximum match (",
                                                   o.max_match, ") is below its minimum (",
                                                   o.min_match, ")"));
  }
  if (o.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the n-gram drafter drafts ", o.max_tokens, " tokens; it must be >= 1"));
  }
  return absl::OkStatus();
}

std::vector<int32_t> DraftNgram(absl::Span<const int32_t> tokens, const NgramDraftOptions& o) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t len = std::min(o.max_match, n - 1); len >= o.min_match; --len) {
    const absl::Span<const int32_t> suffix = tokens.subspan(n - len);
    // The most recent earlier occurrence: it ends before the suffix starts to repeat itself.
    for (int64_t start = n - len - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int64_t from = start + len;
      const int64_t count = std::min(o.max_tokens, n - from);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + from + count);
    }
  }
  return {};
}

std::vector<std::vector<int32_t>> NgramDrafter::Draft(absl::Span<const DraftRequest> requests) {
  std::vector<std::vector<int32_t>> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    NgramDraftOptions o = options_;
    o.max_tokens = std::min(o.max_tokens, requests[i].max_tokens);
    if (o.max_tokens >= 1) out[i] = DraftNgram(requests[i].tokens, o);
  }
  return out;
}

}  // namespace walsh
