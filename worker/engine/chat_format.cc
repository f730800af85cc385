#include "worker/engine/chat_format.h"

#include "absl/strings/str_cat.h"
#include "common/field_error.h"
#include "common/qwen_chat_template.h"
#include "nlohmann/json.hpp"

namespace walsh {

absl::StatusOr<std::vector<PromptPiece>> FormatChatMlPieces(
    const std::vector<ChatMessage>& messages, bool enable_thinking) {
  if (messages.empty()) return FieldError("messages", "at least one is needed");
  ChatPrompt prompt;
  prompt.enable_thinking = enable_thinking;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
      return FieldError(absl::StrCat("messages[", i, "].role"),
                        absl::StrCat("\"", m.role, "\" is not system, user, assistant or tool"));
    }
    if (!m.parts.empty() && m.role != "user") {
      return FieldError(absl::StrCat("messages[", i, "].parts"),
                        absl::StrCat("only a user message has parts, not ", m.role));
    }
    prompt.turns.push_back({.role = m.role, .content = m.content});
    for (const PromptPiece& piece : m.parts) {
      prompt.turns.back().content_parts.push_back({piece.text, piece.markup});
    }
  }
  std::vector<PromptPiece> out;
  for (PromptPart& part : RenderQwenChatParts(prompt)) {
    out.push_back({std::move(part.text), part.markup});
  }
  return out;
}

absl::StatusOr<std::string> FormatChatMl(const std::vector<ChatMessage>& messages,
                                         bool enable_thinking) {
  auto pieces = FormatChatMlPieces(messages, enable_thinking);
  if (!pieces.ok()) return pieces.status();
  std::string out;
  for (const PromptPiece& p : *pieces) out += p.text;
  return out;
}

absl::StatusOr<std::vector<ChatMessage>> ParseChatMessagesJson(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return FieldError("messages", "expected a JSON array of {role, content}");
  }
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& m = j[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return FieldError(absl::StrCat("messages[", i, "].role"), "missing or not a string");
    }
    if (!m.contains("content") || !m["content"].is_string()) {
      return FieldError(absl::StrCat("messages[", i, "].content"), "missing or not a string");
    }
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return out;
}

}  // namespace walsh
