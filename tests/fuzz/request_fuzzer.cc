// libFuzzer target: bytes as a serialized walsh.v1.GenerateRequest (what a client sends),
// through the servers' own parsing (ParseRequest, which names a non-UTF-8 field) and the
// worker's validation, as a Generate and as a Resume, on a text-only worker and on one that
// takes images. Anything may be refused (INVALID_ARGUMENT naming a field); what is accepted stays
// inside the limits, and each accepted image's placeholder is where its span says, whole.
#include <cstddef>
#include <cstdint>

#include "common/raw_messages.h"
#include "google/protobuf/stubs/logging.h"
#include "tests/fuzz/fuzz_input.h"
#include "walsh/v1/generator.pb.h"
#include "worker/server/request_validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace walsh;
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);  // UTF-8 complaints
  (void)quiet;
  if (size > 16384) return 0;
  v1::GenerateRequest request;
  grpc::Slice slice(data, size);
  const absl::Status parsed = ParseRequest(grpc::ByteBuffer(&slice, 1), &request);
  if (!parsed.ok()) {
    if (parsed.code() != absl::StatusCode::kInvalidArgument || parsed.message().empty())
      fuzz::Violated("a parse failure is not INVALID_ARGUMENT with a message");
    return 0;
  }
  const Tokenizer& tokenizer = fuzz::TinyTokenizer();
  ValidationLimits limits;
  limits.vocab = tokenizer.vocab_size();
  limits.max_context = 256;
  limits.max_output_tokens = 128;
  limits.tokenizer = &tokenizer;
  // Images are decoded and placed in validation; only the encoder needs the model.
  static const VisionInput vision = [&] {
    VisionInput v;
    v.preprocess.decode = {.max_bytes = 4096, .max_pixels = 1 << 16};
    v.preprocess.tokens = {.min_tokens = 1, .max_tokens = 16};
    v.max_images = 2;
    v.vision_start = tokenizer.FindToken("<|vision_start|>");
    v.image_pad = tokenizer.FindToken("<|image_pad|>");
    v.vision_end = tokenizer.FindToken("<|vision_end|>");
    return v;
  }();
  const std::vector<int32_t> resumed_prompt = {1, 2, 3};
  for (int run = 0; run < 4; ++run) {
    const std::vector<int32_t>* prompt = run % 2 == 1 ? &resumed_prompt : nullptr;
    limits.vision = run >= 2 ? &vision : nullptr;
    auto valid = ValidateGenerateRequest(request, limits, prompt, prompt ? 1 : 0);
    if (!valid.ok()) {
      if (valid.status().code() != absl::StatusCode::kInvalidArgument ||
          valid.status().message().empty()) {
        fuzz::Violated("a refusal is not INVALID_ARGUMENT with a message");
      }
      continue;
    }
    const GenerationRequest& g = valid->generation;
    if (g.prompt.empty()) fuzz::Violated("an accepted request has no prompt");
    for (int32_t id : g.prompt) {
      if (id < 0 || id >= limits.vocab) fuzz::Violated("an accepted prompt id is out of range");
    }
    if (g.stop.max_tokens < 1 || g.stop.max_tokens > limits.max_output_tokens)
      fuzz::Violated("an accepted max_tokens is outside its limit");
    if (valid->image_spans.size() != valid->images.size())
      fuzz::Violated("an accepted request's images and spans differ in number");
    int64_t pads = 0, placed = 0;
    for (int32_t id : g.prompt) pads += id == vision.image_pad;
    for (size_t k = 0; k < valid->image_spans.size(); ++k) {
      const ImageSpan& span = valid->image_spans[k];
      const PreparedImage& image = valid->images[k];
      if (span.grid_h != image.grid_h || span.grid_w != image.grid_w || span.first < 1 ||
          span.end() > static_cast<int64_t>(g.prompt.size()) ||
          g.prompt[span.first - 1] != vision.vision_start)
        fuzz::Violated("an accepted image's span is not its placeholder");
      for (int64_t i = span.first; i < span.end(); ++i) placed += g.prompt[i] == vision.image_pad;
    }
    if (limits.vision != nullptr && placed != pads)
      fuzz::Violated("an accepted prompt holds pad tokens no image placed");
  }
  return 0;
}
