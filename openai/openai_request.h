// OpenAI-API request bodies (POST /v1/chat/completions and /v1/completions) checked and turned
// into a walsh.v1 GenerateRequest. Every refusal names the field, in the API's own names. A
// field walsh knows but cannot honour (n > 1, echo, ...) is refused, never ignored;
// fields it does not know are ignored, as vLLM does. The field table is docs/openai.md §Fields.
#ifndef WALSH_OPENAI_OPENAI_REQUEST_H_
#define WALSH_OPENAI_OPENAI_REQUEST_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/qwen_chat_template.h"
#include "openai/media_url.h"
#include "walsh/v1/generator.pb.h"

namespace walsh {

struct OpenAiRequest {
  bool chat = true;   // /v1/chat/completions; else /v1/completions
  std::string model;  // empty: the fleet's model
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  // Chat only: how the output is split (reasoning, content, tool calls).
  bool thinking = false;
  bool parse_tool_calls = false;    // tools given and tool_choice is not "none"
  std::string forced_tool;          // a named tool_choice
  bool tool_call_required = false;  // tool_choice "required"
  bool parallel_tool_calls = true;  // false: only the first tool call is returned
  v1::GenerateRequest generate;
  // Images named by http(s) URL: the server fetches each (MediaFetcher) into its prompt piece,
  // still empty here, or refuses the request naming `field`.
  struct RemoteImage {
    int piece = 0;  // in generate.pieces
    MediaUrl url;
    std::string field;  // messages[i].content[j].image_url.url
  };
  std::vector<RemoteImage> remote_images;
  // walsh.v1 field names in INVALID_ARGUMENT messages -> this request's field names.
  std::vector<std::pair<std::string, std::string>> field_names;
};

// `body` is the raw request body (untrusted). A chat's prompt is `generate.pieces`: the
// template's markup apart from the client's text, whose special tokens stay text. A refusal
// is a FieldError (common/field_error.h) naming the field, or INVALID_ARGUMENT for the body.
absl::StatusOr<OpenAiRequest> ParseChatCompletionRequest(const std::string& body);
absl::StatusOr<OpenAiRequest> ParseCompletionRequest(const std::string& body);

// The prompt of a parsed chat as one text, in which special tokens written anywhere are
// recognized (--chat-content-special-tokens: the trusting behaviour of Hugging Face templates).
void JoinChatPieces(v1::GenerateRequest& generate);

}  // namespace walsh

#endif  // WALSH_OPENAI_OPENAI_REQUEST_H_
