// walsh-run --image (docs/vision.md): the prompt with each image's placeholder where its
// <__image__> marker was, and the images' rows. The engine-only build has no image decoders and
// refuses --image.
#ifndef WALSH_TOOLS_RUN_RUN_IMAGES_H_
#define WALSH_TOOLS_RUN_RUN_IMAGES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/run/run_options.h"
#include "worker/engine/image_prompt.h"
#include "worker/model/tokenizer.h"

namespace walsh {

inline constexpr char kImageMarker[] = "<__image__>";

// --prompt's ids with --image's images placed, and their rows in `images`. `text_hidden`: the text
// model's embedding width, which the projector must feed.
absl::StatusOr<std::vector<int32_t>> ImagePromptIds(const RunOptions& o, const Tokenizer& tokenizer,
                                                    int64_t text_hidden, PromptImages* images);

}  // namespace walsh

#endif  // WALSH_TOOLS_RUN_RUN_IMAGES_H_
