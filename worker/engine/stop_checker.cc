#include "worker/engine/stop_checker.h"

#include <algorithm>

namespace walsh {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "";
}

StopChecker::StopChecker(StopConfig config) : config_(std::move(config)) {
  std::erase(config_.stop_strings, std::string());
}

StopChecker::Step StopChecker::Add(int32_t id, const std::string& text) {
  ++generated_;
  Step step;
  const bool eos = !config_.ignore_eos && std::find(config_.eos_ids.begin(), config_.eos_ids.end(),
                                                    id) != config_.eos_ids.end();
  const bool stop_id =
      std::find(config_.stop_ids.begin(), config_.stop_ids.end(), id) != config_.stop_ids.end();
  if (eos || stop_id) {
    step.text = Flush();
    step.finish = FinishReason::kStop;
    step.matched = std::to_string(id);
    return step;
  }
  held_ += text;
  // The earliest complete stop string wins.
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const std::string& s : config_.stop_strings) {
    const size_t at = held_.find(s);
    if (at != std::string::npos && at < best) {
      best = at;
      which = &s;
    }
  }
  if (which != nullptr) {
    step.text = held_.substr(0, best);
    held_.clear();
    step.finish = FinishReason::kStop;
    step.matched = *which;
    return step;
  }
  // Hold back the longest suffix that is a prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : config_.stop_strings) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  step.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  if (generated_ >= config_.max_tokens) {
    step.text += Flush();
    step.finish = FinishReason::kLength;
  }
  return step;
}

std::string StopChecker::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace walsh
