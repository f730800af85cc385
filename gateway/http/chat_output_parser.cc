#include "gateway/http/chat_output_parser.h"

#include "absl/strings/ascii.h"
#include "gateway/http/json_depth.h"
#include "gateway/http/qwen_chat_template.h"
#include "nlohmann/json.hpp"

namespace walsh {
namespace {

constexpr char kThinkOpen[] = "<think>";
constexpr char kThinkClose[] = "</think>";
constexpr char kCallOpen[] = "<tool_call>";
constexpr char kCallClose[] = "</tool_call>";

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t PartialTagAtEnd(const std::string& s, const std::string& tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.compare(s.size() - n, n, tag, 0, n) == 0) return n;
  }
  return 0;
}

}  // namespace

ChatOutputParser::ChatOutputParser(bool thinking, bool tool_calls, const std::string& forced_tool)
    : state_(thinking ? State::kReasoning : State::kContent), tool_calls_(tool_calls) {
  if (!forced_tool.empty()) {
    state_ = State::kToolCall;
    call_ = ForcedToolCallPrefix(forced_tool).substr(sizeof(kCallOpen) - 1);
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
  if (state_ == State::kToolCall) {  // never closed: what the model wrote is content
    out.content += ModelCallText(false);
    call_.clear();
    prompt_part_ = 0;
    state_ = State::kContent;
  }
  return out;
}

std::string ChatOutputParser::ModelCallText(bool closed) const {
  std::string s = prompt_part_ > 0 ? call_.substr(prompt_part_) : kCallOpen + call_;
  if (closed) s += kCallClose;
  return s;
}

void ChatOutputParser::EndToolCall(ChatDelta& out) {
  const nlohmann::json j = nlohmann::json::parse(call_, nullptr, false);
  const bool ok =
      j.is_object() && JsonDepthAtMost(j, kMaxJsonDepth) && j.contains("name") &&
      j["name"].is_string() &&
      (!j.contains("arguments") || j["arguments"].is_object() || j["arguments"].is_string());
  if (ok) {
    ParsedToolCall call{next_index_++, j["name"].get<std::string>(), "{}"};
    if (j.contains("arguments")) {
      call.arguments =
          j["arguments"].is_string() ? j["arguments"].get<std::string>() : j["arguments"].dump();
    }
    out.tool_calls.push_back(std::move(call));
  } else {
    out.content += ModelCallText(true);
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
      after_think_ = true;
      continue;
    }
    if (state_ == State::kContent) {
      if (after_think_) {  // the blank lines between the think block and the answer
        const size_t text = pending_.find_first_not_of('\n');
        pending_.erase(0, text == std::string::npos ? pending_.size() : text);
        if (pending_.empty()) return;
        after_think_ = false;
      }
      if (after_call_) {  // whitespace after a call, before the next call or the end, is neither
        const size_t text = pending_.find_first_not_of(" \n");
        if (text == std::string::npos) {
          if (final) pending_.clear();
          return;
        }
        const std::string rest = pending_.substr(text, sizeof(kCallOpen) - 1);
        if (!final && rest.size() < sizeof(kCallOpen) - 1 &&
            std::string(kCallOpen).compare(0, rest.size(), rest) == 0) {
          return;
        }
        if (rest == kCallOpen) pending_.erase(0, text);
        after_call_ = false;
      }
      const size_t open = tool_calls_ ? pending_.find(kCallOpen) : std::string::npos;
      if (open == std::string::npos) {
        const size_t hold = final || !tool_calls_ ? 0 : PartialTagAtEnd(pending_, kCallOpen);
        out.content += pending_.substr(0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return;
      }
      out.content += pending_.substr(0, open);
      pending_.erase(0, open + sizeof(kCallOpen) - 1);
      state_ = State::kToolCall;
      continue;
    }
    // kToolCall
    const size_t close = pending_.find(kCallClose);
    if (close == std::string::npos) {
      const size_t hold = final ? 0 : PartialTagAtEnd(pending_, kCallClose);
      call_ += pending_.substr(0, pending_.size() - hold);
      pending_.erase(0, pending_.size() - hold);
      return;
    }
    call_ += pending_.substr(0, close);
    pending_.erase(0, close + sizeof(kCallClose) - 1);
    EndToolCall(out);
    state_ = State::kContent;
    after_call_ = true;
  }
}

}  // namespace walsh
