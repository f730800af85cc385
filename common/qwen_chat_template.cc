#include "common/qwen_chat_template.h"

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

// Appends parts, joining neighbours of the same kind.
class PartsWriter {
 public:
  void Markup(const std::string& s) { Add(s, true); }
  void Text(const std::string& s) { Add(s, false); }
  void Image(const std::string& bytes) { parts_.push_back({"", false, bytes}); }
  void Part(const PromptPart& part) {
    if (!part.image.empty()) return Image(part.image);
    part.markup ? Markup(part.text) : Text(part.text);
  }
  std::vector<PromptPart> Take() { return std::move(parts_); }

 private:
  void Add(const std::string& s, bool markup) {
    if (s.empty()) return;
    if (!parts_.empty() && parts_.back().markup == markup && parts_.back().image.empty()) {
      parts_.back().text += s;
    } else {
      parts_.push_back({s, markup});
    }
  }
  std::vector<PromptPart> parts_;
};

// What ForcedToolCallPrefix(name) writes, as parts.
void WriteToolCallOpening(PartsWriter& w, const std::string& name) {
  w.Markup(absl::StrCat(kToolCallOpen, "\n{\"name\": "));
  w.Text(nlohmann::json(name).dump());
  w.Markup(", \"arguments\": ");
}

void WriteToolCall(PartsWriter& w, const RenderedToolCall& call) {
  WriteToolCallOpening(w, call.name);
  w.Text(call.arguments_json);
  w.Markup(absl::StrCat("}\n", kToolCallClose));
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
  return absl::StrCat(kToolCallOpen, "\n{\"name\": ", nlohmann::json(name).dump(),
                      ", \"arguments\": ");
}

std::vector<PromptPart> RenderQwenChatParts(const ChatPrompt& p) {
  PartsWriter w;
  size_t first = 0;
  const bool system_first = !p.turns.empty() && p.turns[0].role == "system";
  if (!p.tools_json.empty()) {
    w.Markup("<|im_start|>system\n");
    if (system_first) {
      w.Text(p.turns[0].content);
      w.Markup("\n\n");
    }
    w.Markup(kToolsPreamble);
    for (const std::string& t : p.tools_json) {
      w.Markup("\n");
      w.Text(t);
    }
    w.Markup(absl::StrCat(kToolsPostamble, "<|im_end|>\n"));
    if (system_first) first = 1;
  }
  for (size_t i = first; i < p.turns.size(); ++i) {
    const ChatTurn& t = p.turns[i];
    if (t.role == "tool") {
      if (i == 0 || p.turns[i - 1].role != "tool") w.Markup("<|im_start|>user");
      w.Markup("\n<tool_response>\n");
      w.Text(t.content);
      w.Markup("\n</tool_response>");
      if (i + 1 == p.turns.size() || p.turns[i + 1].role != "tool") w.Markup("<|im_end|>\n");
      continue;
    }
    w.Markup(absl::StrCat("<|im_start|>", t.role, "\n"));
    w.Text(t.content);
    for (const PromptPart& part : t.content_parts) w.Part(part);
    for (size_t c = 0; c < t.tool_calls.size(); ++c) {
      if (c > 0 || !t.content.empty() || !t.content_parts.empty()) w.Markup("\n");
      WriteToolCall(w, t.tool_calls[c]);
    }
    w.Markup("<|im_end|>\n");
  }
  w.Markup("<|im_start|>assistant\n");
  if (!p.enable_thinking || !p.forced_tool.empty()) w.Markup("<think>\n\n</think>\n\n");
  if (!p.forced_tool.empty()) WriteToolCallOpening(w, p.forced_tool);
  return w.Take();
}

std::string RenderQwenChat(const ChatPrompt& p) {
  std::string out;
  for (const PromptPart& part : RenderQwenChatParts(p)) out += part.text;
  return out;
}

}  // namespace walsh
