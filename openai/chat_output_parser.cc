#include "openai/chat_output_parser.h"

#include "absl/types/optional.h"
#include "common/json_shape.h"
#include "common/qwen_chat_template.h"
#include "nlohmann/json.hpp"

namespace walsh {
namespace {

constexpr char kThinkOpen[] = "<think>";
constexpr char kThinkClose[] = "</think>";

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t PartialTagAtEnd(const std::string& s, const std::string& tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.compare(s.size() - n, n, tag, 0, n) == 0) return n;
  }
  return 0;
}

// {"name": "f", "arguments": {...}}, the arguments also as a string holding a JSON object;
// nullopt when the text is anything else (or too big to handle safely).
absl::optional<ParsedToolCall> ParseToolCall(const std::string& body) {
  if (CheckJsonShape(body) != JsonShape::kOk) return absl::nullopt;
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return absl::nullopt;
  ParsedToolCall call{0, j["name"].get<std::string>(), "{}"};
  if (j.contains("arguments")) {
    const nlohmann::ordered_json& args = j["arguments"];
    if (args.is_object()) {
      call.arguments = TemplateJson(args);  // as vLLM's json.dumps writes it
    } else if (args.is_string() && CheckJsonShape(args.get<std::string>()) == JsonShape::kOk &&
               nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false).is_object()) {
      call.arguments = args.get<std::string>();
    } else {
      return absl::nullopt;
    }
  }
  return call;
}

}  // namespace

ChatOutputParser::ChatOutputParser(bool thinking, bool tool_calls, const std::string& forced_tool,
                                   bool parallel)
    : state_(thinking ? State::kReasoning : State::kContent),
      tool_calls_(tool_calls),
      parallel_(parallel) {
  if (!forced_tool.empty()) {
    state_ = State::kToolCall;
    call_ = ForcedToolCallPrefix(forced_tool).substr(sizeof(kToolCallOpen) - 1);
    prompt_part_ = call_.size();
  }
}

ChatDelta ChatOutputParser::Feed(const std::string& text) {
  pending_ += text;
  ChatDelta out;
  Run(false, out);
  return out;
}

ChatDelta ChatOutputParser::Finish() {
  ChatDelta out;
  Run(true, out);
  if (state_ == State::kToolCall) {  // never closed
    if (prompt_part_ > 0) {
      EndToolCall(out, /*closed=*/false);  // a forced call may end with the output
    } else {
      out.content += ModelCallText(false);
      call_.clear();
    }
    state_ = State::kContent;
  }
  return out;
}

std::string ChatOutputParser::ModelCallText(bool closed) const {
  std::string s = prompt_part_ > 0 ? call_.substr(prompt_part_) : kToolCallOpen + call_;
  if (closed) s += kToolCallClose;
  return s;
}

void ChatOutputParser::EndToolCall(ChatDelta& out, bool closed) {
  if (absl::optional<ParsedToolCall> call = ParseToolCall(call_)) {
    call->index = next_index_++;
    if (parallel_ || call->index == 0) out.tool_calls.push_back(std::move(*call));
  } else {
    out.content += ModelCallText(closed);
  }
  call_.clear();
  prompt_part_ = 0;
}

void ChatOutputParser::Run(bool final, ChatDelta& out) {
  while (!pending_.empty()) {
    if (state_ == State::kReasoning) {
      if (reasoning_start_) {  // the model may open its own think block
        if (pending_.size() < sizeof(kThinkOpen) - 1 && !final &&
            std::string(kThinkOpen).compare(0, pending_.size(), pending_) == 0) {
          return;
        }
        if (pending_.rfind(kThinkOpen, 0) == 0) pending_.erase(0, sizeof(kThinkOpen) - 1);
        reasoning_start_ = false;
        continue;
      }
      const size_t close = pending_.find(kThinkClose);
      if (close == std::string::npos) {
        const size_t hold = final ? 0 : PartialTagAtEnd(pending_, kThinkClose);
        out.reasoning += pending_.substr(0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return;
      }
      out.reasoning += pending_.substr(0, close);
      pending_.erase(0, close + sizeof(kThinkClose) - 1);
      state_ = State::kContent;
      continue;
    }
    if (state_ == State::kContent) {
      if (after_call_) {  // whitespace after a call, before the next call or the end, is neither
        const size_t text = pending_.find_first_not_of(" \n");
        if (text == std::string::npos) {
          if (final) pending_.clear();
          return;
        }
        const std::string rest = pending_.substr(text, sizeof(kToolCallOpen) - 1);
        if (!final && rest.size() < sizeof(kToolCallOpen) - 1 &&
            std::string(kToolCallOpen).compare(0, rest.size(), rest) == 0) {
          return;
        }
        if (rest == kToolCallOpen) pending_.erase(0, text);
        after_call_ = false;
      }
      const size_t open = tool_calls_ ? pending_.find(kToolCallOpen) : std::string::npos;
      if (open == std::string::npos) {
        const size_t hold = final || !tool_calls_ ? 0 : PartialTagAtEnd(pending_, kToolCallOpen);
        out.content += pending_.substr(0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return;
      }
      out.content += pending_.substr(0, open);
      pending_.erase(0, open + sizeof(kToolCallOpen) - 1);
      state_ = State::kToolCall;
      continue;
    }
    // kToolCall
    const size_t close = pending_.find(kToolCallClose);
    if (close == std::string::npos) {
      const size_t hold = final ? 0 : PartialTagAtEnd(pending_, kToolCallClose);
      call_ += pending_.substr(0, pending_.size() - hold);
      pending_.erase(0, pending_.size() - hold);
      return;
    }
    call_ += pending_.substr(0, close);
    pending_.erase(0, close + sizeof(kToolCallClose) - 1);
    EndToolCall(out, /*closed=*/true);
    state_ = State::kContent;
    after_call_ = true;
  }
}

}  // namespace walsh
