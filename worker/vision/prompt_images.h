// A prompt's images (docs/vision.md), for the worker's requests and walsh-run alike: each decoded
// and preprocessed as it is met, rendered as its placeholder, found again in the tokenized prompt,
// and encoded into the rows the engine puts in place of the placeholder's pad tokens.
#ifndef WALSH_WORKER_VISION_PROMPT_IMAGES_H_
#define WALSH_WORKER_VISION_PROMPT_IMAGES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/engine/image_prompt.h"
#include "worker/model/tokenizer.h"
#include "worker/vision/image_preprocessor.h"
#include "worker/vision/pixel_values.h"
#include "worker/vision/vision_model.h"

namespace walsh {

// What a worker with a vision projector (--mmproj) takes images with.
struct VisionInput {
  const VisionModel* model = nullptr;
  ImagePreprocessOptions preprocess;
  int64_t max_images = 4;  // per request (--max-images-per-request)
  // All of a request's images together, in pixels as their files declare them
  // (--max-request-image-pixels).
  int64_t max_request_pixels = 67'108'864;
  int threads = 1;  // the encoder's, per request
  // The placeholder's tokens, read from the tokenizer by name.
  int32_t vision_start = -1, image_pad = -1, vision_end = -1;
};

// The projector's preprocessing (patch, merge, mean, std), the limits given, and the placeholder's
// tokens from the tokenizer; INVALID_ARGUMENT naming a token the tokenizer lacks.
absl::StatusOr<VisionInput> VisionInputFor(const VisionModel& model, const Tokenizer& tokenizer,
                                           const ImageDecodeLimits& limits, int64_t max_images,
                                           int threads);

// What an image will cost, from its file's header alone (image_size.h): the pixels it decodes to
// and the rows (merged tokens) its placeholder takes, without its two markers.
struct ImageCost {
  int64_t pixels = 0, rows = 0;
};
// INVALID_ARGUMENT naming `field` for what PrepareImage would refuse on the header alone: bytes
// that are not an image walsh reads, or one over the byte or pixel limits.
absl::StatusOr<ImageCost> ImageCostOf(const VisionInput& vision, absl::string_view field,
                                      std::string_view bytes);

// An image decoded and preprocessed, before its rows are computed.
struct PreparedImage {
  std::string field;  // the request field it came from, for errors
  PixelValues pixels;
  int64_t grid_h = 0, grid_w = 0;  // merged windows
  uint64_t digest = 0;             // of the bytes and the grid: its prefix-cache key
};

// Decodes and preprocesses one image. INVALID_ARGUMENT naming `field` for bytes that are not an
// image walsh decodes, or an image over the limits.
absl::StatusOr<PreparedImage> PrepareImage(const VisionInput& vision, std::string field,
                                           std::string_view bytes);

// The placeholder's text, as template markup: <|vision_start|>, a <|image_pad|> per row,
// <|vision_end|>.
std::string ImagePlaceholder(const PreparedImage& image);

// Where each image's pad tokens sit in the tokenized prompt: the k-th run of <|image_pad|> after a
// <|vision_start|> is image k's, and must be exactly its rows long. A prompt that holds pad tokens
// no image placed (typed in text, or in token ids) is refused naming `prompt_field`.
absl::StatusOr<std::vector<ImageSpan>> LocateImages(absl::Span<const int32_t> prompt,
                                                    const VisionInput& vision,
                                                    const std::vector<PreparedImage>& images,
                                                    absl::string_view prompt_field);

// The images' rows, computed on a pool of vision.threads, with their spans and digests.
absl::StatusOr<PromptImages> EncodeImages(const VisionInput& vision,
                                          const std::vector<PreparedImage>& images,
                                          std::vector<ImageSpan> spans);

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_PROMPT_IMAGES_H_
