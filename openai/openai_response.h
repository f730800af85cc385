// The JSON bodies of the OpenAI API's responses: whole completions, stream chunks, usage,
// log-probabilities and the model list (docs/openai.md §Responses). Token strings are written
// "token_id:N" (as vLLM's --return-tokens-as-token-ids does): the gateway holds no tokenizer.
#ifndef WALSH_OPENAI_OPENAI_RESPONSE_H_
#define WALSH_OPENAI_OPENAI_RESPONSE_H_

#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"
#include "openai/chat_output_parser.h"
#include "walsh/v1/generator.pb.h"

namespace walsh {

struct ResponseHeader {
  bool chat = true;
  std::string id;  // chatcmpl-<request id> or cmpl-<request id>
  int64_t created = 0;
  std::string model;
  std::string system_fingerprint;
};

// The shared fields of a response or chunk, with an empty "choices".
nlohmann::json ResponseBase(const ResponseHeader& h, bool chunk);
nlohmann::json Usage(uint32_t prompt_tokens, uint32_t completion_tokens);
// A chat delta's fields ("reasoning_content", "content", "tool_calls" as stream deltas).
nlohmann::json DeltaJson(const ChatDelta& d, const std::string& call_id_base);
// "call_<base>_<index>"; the base is random per answer, so ids never repeat across turns.
std::string ToolCallId(const std::string& call_id_base, int index);

// Log-probabilities of some tokens, in the chat shape ({"content": [...]}) or the completions
// shape ({"tokens", "token_logprobs", "top_logprobs"}); null when there are none.
class LogprobsBuilder {
 public:
  explicit LogprobsBuilder(bool chat) : chat_(chat) {}
  void Add(const v1::Token& t);
  bool empty() const { return count_ == 0; }
  nlohmann::json Take();  // and start again

 private:
  bool chat_;
  int count_ = 0;
  nlohmann::json content_ = nlohmann::json::array();
  nlohmann::json tokens_ = nlohmann::json::array(), token_logprobs_ = nlohmann::json::array(),
                 top_ = nlohmann::json::array();
};

std::string FinishReason(const std::string& walsh_reason, bool tool_calls);

}  // namespace walsh

#endif  // WALSH_OPENAI_OPENAI_RESPONSE_H_
