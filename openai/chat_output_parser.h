// Splits a chat's streamed output text into what the OpenAI API returns separately
// (docs/openai.md §Reasoning and tool calls):
// - with thinking on, the text before "</think>" is reasoning_content (a leading "<think>" the
//   model writes is dropped; without "</think>" the whole output is reasoning; what follows
//   "</think>", newlines included, is content, as vLLM's Qwen3 parser returns it);
// - with tools, each <tool_call>{"name": ..., "arguments": {...}}</tool_call> is a tool call;
//   one whose JSON does not parse stays in the content, tags and all; without `parallel` only
//   the first call is returned;
// - the rest is content.
// Text that may be the start of a tag is held back until the next piece or Finish(), so a
// split never depends on how the output was chunked: feeding the text whole or piece by piece
// gives the same concatenated result.
#ifndef WALSH_OPENAI_CHAT_OUTPUT_PARSER_H_
#define WALSH_OPENAI_CHAT_OUTPUT_PARSER_H_

#include <string>
#include <vector>

namespace walsh {

struct ParsedToolCall {
  int index = 0;
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ChatOutputParser {
 public:
  // `forced_tool`: the prompt already began a call to this function (a named tool_choice);
  // the output continues it from its arguments.
  ChatOutputParser(bool thinking, bool tool_calls, const std::string& forced_tool = "",
                   bool parallel = true);

  ChatDelta Feed(const std::string& text);
  ChatDelta Finish();
  int tool_calls_seen() const { return next_index_; }

 private:
  enum class State { kReasoning, kContent, kToolCall };
  void Run(bool final, ChatDelta& out);
  void EndToolCall(ChatDelta& out, bool closed);
  // What the model itself wrote of the open call (for content when it is not a call).
  std::string ModelCallText(bool closed) const;

  State state_;
  bool tool_calls_;
  bool parallel_;
  bool reasoning_start_ = true;  // in reasoning, nothing consumed yet
  bool after_call_ = false;      // in content, right after "</tool_call>"
  std::string pending_;          // not yet classified
  std::string call_;             // the body of an open <tool_call>
  size_t prompt_part_ = 0;       // how much of call_ the prompt wrote (a forced call)
  int next_index_ = 0;
};

}  // namespace walsh

#endif  // WALSH_OPENAI_CHAT_OUTPUT_PARSER_H_
