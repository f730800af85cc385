#include "openai/openai_response.h"

#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

std::string TokenString(int32_t id) { return absl::StrCat("token_id:", id); }

}  // namespace

nlohmann::json ResponseBase(const ResponseHeader& h, bool chunk) {
  const char* object =
      h.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", h.id},
          {"object", object},
          {"created", h.created},
          {"model", h.model},
          {"system_fingerprint", h.system_fingerprint},
          {"choices", nlohmann::json::array()}};
}

nlohmann::json Usage(uint32_t prompt_tokens, uint32_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

std::string ToolCallId(const std::string& call_id_base, int index) {
  return absl::StrCat("call_", call_id_base, "_", index);
}

nlohmann::json DeltaJson(const ChatDelta& d, const std::string& call_id_base) {
  nlohmann::json j = nlohmann::json::object();
  if (!d.reasoning.empty()) j["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) j["content"] = d.content;
  if (!d.tool_calls.empty()) {
    nlohmann::json calls = nlohmann::json::array();
    for (const ParsedToolCall& c : d.tool_calls) {
      calls.push_back({{"index", c.index},
                       {"id", ToolCallId(call_id_base, c.index)},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    j["tool_calls"] = std::move(calls);
  }
  return j;
}

void LogprobsBuilder::Add(const v1::Token& t) {
  ++count_;
  if (chat_) {
    nlohmann::json top = nlohmann::json::array();
    for (const v1::TokenLogprob& a : t.top_logprobs()) {
      top.push_back({{"token", TokenString(a.id())}, {"logprob", a.logprob()}, {"bytes", nullptr}});
    }
    content_.push_back({{"token", TokenString(t.id())},
                        {"logprob", t.logprob()},
                        {"bytes", nullptr},
                        {"top_logprobs", std::move(top)}});
    return;
  }
  tokens_.push_back(TokenString(t.id()));
  token_logprobs_.push_back(t.logprob());
  nlohmann::json top = nlohmann::json::object();
  for (const v1::TokenLogprob& a : t.top_logprobs()) top[TokenString(a.id())] = a.logprob();
  top_.push_back(std::move(top));
}

nlohmann::json LogprobsBuilder::Take() {
  if (count_ == 0) return nullptr;
  nlohmann::json out;
  if (chat_) {
    out = {{"content", std::move(content_)}};
    content_ = nlohmann::json::array();
  } else {
    out = {{"tokens", std::move(tokens_)},
           {"token_logprobs", std::move(token_logprobs_)},
           {"top_logprobs", std::move(top_)}};
    tokens_ = token_logprobs_ = top_ = nlohmann::json::array();
  }
  count_ = 0;
  return out;
}

std::string FinishReason(const std::string& walsh_reason, bool tool_calls) {
  if (walsh_reason == "stop" && tool_calls) return "tool_calls";
  return walsh_reason;
}

}  // namespace walsh
