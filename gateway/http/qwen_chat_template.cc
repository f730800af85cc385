#include "gateway/http/qwen_chat_template.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace walsh {
namespace {

constexpr char kToolsPreamble[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr char kToolsPostamble[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call>";

std::string ToolCallText(const RenderedToolCall& call) {
  return absl::StrCat("<tool_call>\n{\"name\": ", nlohmann::json(call.name).dump(),
                      ", \"arguments\": ", call.arguments_json, "}\n</tool_call>");
}

}  // namespace

std::string TemplateJson(const nlohmann::ordered_json& v) {
  if (v.is_object()) {
    std::string out = "{";
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it != v.begin()) out += ", ";
      absl::StrAppend(&out, nlohmann::json(it.key()).dump(), ": ", TemplateJson(it.value()));
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ", ";
      out += TemplateJson(v[i]);
    }
    return out + "]";
  }
  return v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string ForcedToolCallPrefix(const std::string& name) {
  return absl::StrCat("<tool_call>\n{\"name\": ", nlohmann::json(name).dump(), ", \"arguments\": ");
}

std::string RenderQwenChat(const ChatPrompt& p) {
  std::string out;
  size_t first = 0;
  const bool system_first = !p.turns.empty() && p.turns[0].role == "system";
  if (!p.tools_json.empty()) {
    absl::StrAppend(&out, "<|im_start|>system\n");
    if (system_first) absl::StrAppend(&out, p.turns[0].content, "\n\n");
    absl::StrAppend(&out, kToolsPreamble);
    for (const std::string& t : p.tools_json) absl::StrAppend(&out, "\n", t);
    absl::StrAppend(&out, kToolsPostamble, "<|im_end|>\n");
    if (system_first) first = 1;
  }
  for (size_t i = first; i < p.turns.size(); ++i) {
    const ChatTurn& t = p.turns[i];
    if (t.role == "tool") {
      if (i == 0 || p.turns[i - 1].role != "tool") absl::StrAppend(&out, "<|im_start|>user");
      absl::StrAppend(&out, "\n<tool_response>\n", t.content, "\n</tool_response>");
      if (i + 1 == p.turns.size() || p.turns[i + 1].role != "tool") {
        absl::StrAppend(&out, "<|im_end|>\n");
      }
      continue;
    }
    absl::StrAppend(&out, "<|im_start|>", t.role, "\n", t.content);
    for (size_t c = 0; c < t.tool_calls.size(); ++c) {
      if (c > 0 || !t.content.empty()) absl::StrAppend(&out, "\n");
      absl::StrAppend(&out, ToolCallText(t.tool_calls[c]));
    }
    absl::StrAppend(&out, "<|im_end|>\n");
  }
  absl::StrAppend(&out, "<|im_start|>assistant\n");
  if (!p.enable_thinking || !p.forced_tool.empty())
    absl::StrAppend(&out, "<think>\n\n</think>\n\n");
  if (!p.forced_tool.empty()) absl::StrAppend(&out, ForcedToolCallPrefix(p.forced_tool));
  return out;
}

}  // namespace walsh
