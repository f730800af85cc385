#include "worker/engine/image_prompt.h"

#include <algorithm>

namespace walsh {

int32_t ImageTokenKey(uint64_t digest, int64_t index) {
  // splitmix64's finalizer over the digest and the index.
  uint64_t z = digest + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return -1 - static_cast<int32_t>(z & 0x7fffffff);
}

std::vector<int32_t> KeyImageTokens(absl::Span<const int32_t> prompt, const PromptImages& images) {
  std::vector<int32_t> out(prompt.begin(), prompt.end());
  for (size_t k = 0; k < images.spans.size(); ++k) {
    const ImageSpan& s = images.spans[k];
    for (int64_t i = 0; i < s.tokens(); ++i) out[s.first + i] = ImageTokenKey(images.digests[k], i);
  }
  return out;
}

void AttachImageInputs(const PromptImages& images, int64_t begin, SequenceInput& in) {
  if (images.empty()) return;
  const int64_t end = begin + static_cast<int64_t>(in.tokens.size());
  in.rope_positions = MropePositions(images.spans, begin, end);
  in.embedding_of_token.clear();
  in.embeddings.clear();
  int64_t row = 0;  // the first row of the span at hand, among all of them
  for (const ImageSpan& s : images.spans) {
    const int64_t from = std::max(begin, s.first), to = std::min(end, s.end());
    for (int64_t i = from; i < to; ++i) {
      if (in.embedding_of_token.empty()) in.embedding_of_token.assign(end - begin, -1);
      in.embedding_of_token[i - begin] = static_cast<int32_t>(in.embeddings.size() / images.width);
      const float* r = images.rows.data() + (row + i - s.first) * images.width;
      in.embeddings.insert(in.embeddings.end(), r, r + images.width);
    }
    row += s.tokens();
  }
}

}  // namespace walsh
