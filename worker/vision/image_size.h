// The size an image file's header declares, read without decoding a pixel: PNG's IHDR (its first
// chunk), JPEG's first frame header (SOFn), WebP's header (libwebp). What an image will cost, its
// pixels and its tokens, is so known before anything is allocated for it (docs/vision.md §2.1);
// the decoder checks the size it finds again, so a header that lies here only fails later.
#ifndef WALSH_WORKER_VISION_IMAGE_SIZE_H_
#define WALSH_WORKER_VISION_IMAGE_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace walsh {

struct ImageSize {
  int64_t width = 0, height = 0;
};

// INVALID_ARGUMENT saying what could not be read: not PNG, JPEG or WebP, or a header cut short
// or malformed.
absl::StatusOr<ImageSize> ReadImageSize(absl::Span<const uint8_t> bytes);

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_IMAGE_SIZE_H_
