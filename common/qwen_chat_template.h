// Chat messages and tools rendered into a prompt as the Qwen3 chat template does (docs/openai.md
// §Prompt): ChatML turns; tools listed in the system turn inside <tools></tools>; an assistant's
// tool calls as <tool_call>{"name": ..., "arguments": ...}</tool_call>; consecutive tool results
// as one user turn of <tool_response> blocks; then the assistant's turn, with an empty think
// block when thinking is off. The one renderer: the gateway's HTTP face and the worker's chat
// requests (worker/engine/chat_format.h) both render through it, so a chat sent over HTTP and
// over gRPC is the same prompt.
#ifndef WALSH_COMMON_QWEN_CHAT_TEMPLATE_H_
#define WALSH_COMMON_QWEN_CHAT_TEMPLATE_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace walsh {

// The tags around each tool call in the assistant's output.
inline constexpr char kToolCallOpen[] = "<tool_call>";
inline constexpr char kToolCallClose[] = "</tool_call>";

struct RenderedToolCall {
  std::string name;
  std::string arguments_json;  // a JSON object, as text
};

// A part of the rendered prompt: the template's own markup, or text that came from the client
// (contents, tool definitions, call arguments), whose special tokens must stay text.
struct PromptPart {
  std::string text;
  bool markup = false;
  // Instead of text: an image's file bytes, which the worker renders as its placeholder
  // (walsh.v1 PromptPiece.image). Never merged with a neighbour.
  std::string image;
};

struct ChatTurn {
  std::string role;  // system, user, assistant or tool
  std::string content;
  std::vector<RenderedToolCall> tool_calls;  // assistant turns only
  // When not empty, the content instead, in order: the client's text, and its images (as bytes, or
  // as their placeholders' markup where the worker renders).
  std::vector<PromptPart> content_parts;
};

struct ChatPrompt {
  std::vector<ChatTurn> turns;
  std::vector<std::string> tools_json;  // each {"type": "function", "function": {...}}, tojson
  bool enable_thinking = false;
  // A named tool_choice: the assistant's turn is begun with this function's call, so the
  // model writes only its arguments.
  std::string forced_tool;
};

// A value as the template's `tojson` (Python's json.dumps) writes it: keys in the given order,
// ", " and ": " between items, non-ASCII characters as they are. `v` must be shallow enough to
// print recursively (json_shape.h).
std::string TemplateJson(const nlohmann::ordered_json& v);

// The prefix of the assistant's output that a forced tool call puts in the prompt.
std::string ForcedToolCallPrefix(const std::string& name);

std::vector<PromptPart> RenderQwenChatParts(const ChatPrompt& prompt);
std::string RenderQwenChat(const ChatPrompt& prompt);  // the parts joined

}  // namespace walsh

#endif  // WALSH_COMMON_QWEN_CHAT_TEMPLATE_H_
