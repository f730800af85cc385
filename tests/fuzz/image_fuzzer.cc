// libFuzzer target: arbitrary bytes through image decoding (PNG, JPEG, WebP) and preprocessing
// (smart resize, bicubic, normalization), within small limits so each input is cheap. Anything may
// be refused, with INVALID_ARGUMENT and a message; what is accepted has the rule's shape, and
// every normalized value lies in [-1, 1] (mean and std 0.5).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_input.h"
#include "worker/vision/image_preprocessor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace walsh;
  ImagePreprocessOptions options;
  options.decode.max_pixels = 1 << 20;
  options.tokens = {.min_tokens = 1, .max_tokens = 16};
  const auto pixels = PreprocessImage({data, size}, options);
  if (!pixels.ok()) {
    if (pixels.status().code() != absl::StatusCode::kInvalidArgument) {
      fuzz::Violated("a refusal that is not INVALID_ARGUMENT");
    }
    if (pixels.status().message().empty()) fuzz::Violated("a refusal without a message");
    return 0;
  }
  if (pixels->height % 32 != 0 || pixels->width % 32 != 0 || pixels->height < 32 ||
      pixels->width < 32) {
    fuzz::Violated("a resized side that is not a positive multiple of 32");
  }
  if (pixels->planes.size() != static_cast<size_t>(3 * pixels->height * pixels->width)) {
    fuzz::Violated("planes of the wrong size");
  }
  for (float v : pixels->planes) {
    if (!(v >= -1.0f && v <= 1.0f)) fuzz::Violated("a normalized value outside [-1, 1]");
  }
  return 0;
}
