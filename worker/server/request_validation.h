// Turns a walsh.v1 GenerateRequest into an engine request, checking every field. Errors are
// INVALID_ARGUMENT messages that name the field and the allowed range.
#ifndef WALSH_WORKER_SERVER_REQUEST_VALIDATION_H_
#define WALSH_WORKER_SERVER_REQUEST_VALIDATION_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "constraint/constraint_cache.h"
#include "walsh/v1/generator.pb.h"
#include "worker/engine/generation.h"
#include "worker/model/tokenizer.h"
#include "worker/vision/prompt_images.h"

namespace walsh {

struct ValidationLimits {
  int64_t vocab = 0;
  int64_t max_context = 0;                 // prompt + max_tokens
  int64_t max_output_tokens = 0;           // max_tokens
  const Tokenizer* tokenizer = nullptr;    // null: token-id input only
  ConstraintCache* constraints = nullptr;  // null: constraints are refused
  const VisionInput* vision = nullptr;     // null: images are refused
  MaskLimits mask_limits;                  // a constraint's work per token
};

struct ValidRequest {
  GenerationRequest generation;
  uint64_t seed = 0;
  int64_t speculative_tokens = -1;  // num_speculative_tokens; -1: the worker's
  // Its images, decoded and preprocessed, and where their placeholders sit in the prompt.
  std::vector<PreparedImage> images;
  std::vector<ImageSpan> image_spans;
};

// Whether the request carries an image (a chat part or a prompt piece): such a request is
// prepared apart from the others (ServiceContext::prepare_images).
bool CarriesImages(const v1::GenerateRequest& req);

// `prompt_override`: the prompt ids of a Resume (the request's own input is then ignored).
absl::StatusOr<ValidRequest> ValidateGenerateRequest(const v1::GenerateRequest& request,
                                                     const ValidationLimits& limits,
                                                     const std::vector<int32_t>* prompt_override,
                                                     int64_t already_emitted);

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_REQUEST_VALIDATION_H_
