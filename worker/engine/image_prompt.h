// A prompt's images as the engine takes them (docs/vision.md §4): where each image's tokens sit,
// the encoder's rows that replace their embeddings, and the ids those tokens carry in the
// sequence's token list, which key the prefix cache by the image's content.
#ifndef WALSH_WORKER_ENGINE_IMAGE_PROMPT_H_
#define WALSH_WORKER_ENGINE_IMAGE_PROMPT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/engine/kv_manager.h"
#include "worker/engine/mrope_positions.h"

namespace walsh {

struct PromptImages {
  std::vector<ImageSpan> spans;   // in prompt order
  std::vector<uint64_t> digests;  // per image: of its bytes and its grid (the cache's key)
  std::vector<float> rows;        // every image's rows in order, `width` floats each
  int64_t width = 0;

  bool empty() const { return spans.empty(); }
};

// The id token `index` of an image with `digest` carries in the sequence's token list: negative,
// so never a vocabulary id (the engine takes one only where a row replaces the embedding), and
// 31 bits of a hash of the two, so that the prefix cache shares an image's pages and states only
// with the same image at the same place.
int32_t ImageTokenKey(uint64_t digest, int64_t index);

// `prompt` with each image's tokens replaced by their keys: what the scheduler feeds the engine.
// The spans must lie within the prompt.
std::vector<int32_t> KeyImageTokens(absl::Span<const int32_t> prompt, const PromptImages& images);

// Sets `in`'s image inputs for its tokens, which sit at [begin, begin + in.tokens.size()) of a
// sequence whose prompt holds `images`: M-RoPE positions for every token (the text after an
// image included), and the rows of the image tokens among them.
void AttachImageInputs(const PromptImages& images, int64_t begin, SequenceInput& in);

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_IMAGE_PROMPT_H_
