// libFuzzer target: bytes as a serialized walsh.v1.GenerateRequest (what a client sends),
// through the servers' own parsing (ParseRequest, which names a non-UTF-8 field) and the
// worker's validation, as a Generate and as a Resume. Anything may be refused
// (INVALID_ARGUMENT naming a field); what is accepted stays inside the limits.
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
  const grpc::Status parsed = ParseRequest(grpc::ByteBuffer(&slice, 1), &request);
  if (!parsed.ok()) {
    if (parsed.error_code() != grpc::StatusCode::INVALID_ARGUMENT || parsed.error_message().empty())
      fuzz::Violated("a parse failure is not INVALID_ARGUMENT with a message");
    return 0;
  }
  const Tokenizer& tokenizer = fuzz::TinyTokenizer();
  ValidationLimits limits;
  limits.vocab = tokenizer.vocab_size();
  limits.max_context = 256;
  limits.max_output_tokens = 128;
  limits.tokenizer = &tokenizer;
  const std::vector<int32_t> resumed_prompt = {1, 2, 3};
  for (const std::vector<int32_t>* prompt :
       {static_cast<const std::vector<int32_t>*>(nullptr), &resumed_prompt}) {
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
  }
  return 0;
}
