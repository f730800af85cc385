// The worker's chat requests rendered by the one Qwen chat template renderer
// (common/qwen_chat_template.h): each message as "<|im_start|>{role}\n{content}<|im_end|>\n"
// (tool results as <tool_response> blocks of a user turn), then "<|im_start|>assistant\n", with an
// empty "<think>\n\n</think>\n\n" block when thinking is off. (The file's Jinja template is not
// interpreted: Debian has no well-kept C++ Jinja library; this is its output.)
#ifndef WALSH_WORKER_ENGINE_CHAT_FORMAT_H_
#define WALSH_WORKER_ENGINE_CHAT_FORMAT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/tokenizer.h"

namespace walsh {

struct ChatMessage {
  std::string role;  // system, user, assistant or tool
  std::string content;
  // A user message's content instead, when not empty: its text, and the markup of its images'
  // placeholders (request_images.h), in order.
  std::vector<PromptPiece> parts;
};

absl::StatusOr<std::string> FormatChatMl(const std::vector<ChatMessage>& messages,
                                         bool enable_thinking);
// The same prompt in pieces: the template's markup, and each message's content as text (special
// tokens written in it stay text).
absl::StatusOr<std::vector<PromptPiece>> FormatChatMlPieces(
    const std::vector<ChatMessage>& messages, bool enable_thinking);

// Parses [{"role": ..., "content": ...}, ...]; errors name the element and field.
absl::StatusOr<std::vector<ChatMessage>> ParseChatMessagesJson(const std::string& json);

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_CHAT_FORMAT_H_
