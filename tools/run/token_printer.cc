// TokenPrinter: walsh-run's three output formats.
#include "tools/run/token_printer.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace walsh {
namespace {

std::string JsonEscape(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void TokenPrinter::Print(const GeneratedToken& t) {
  if (output_ == "text") {
    std::fwrite(t.text.data(), 1, t.text.size(), stdout);
  } else if (output_ == "ids") {
    std::printf("%s%d", t.index ? "," : "", t.id);
  } else {
    std::string top;
    for (const auto& [id, lp] : t.top_logprobs) {
      absl::StrAppend(&top, top.empty() ? "" : ",", "{\"id\":", id,
                      ",\"logprob\":", std::to_string(lp), "}");
    }
    const std::string tops = with_logprobs_ ? absl::StrCat(",\"top_logprobs\":[", top, "]") : "";
    std::printf("{\"index\":%lld,\"id\":%d,\"text\":%s,\"logprob\":%g%s}\n",
                static_cast<long long>(t.index), t.id, JsonEscape(t.text).c_str(), t.logprob,
                tops.c_str());
  }
  std::fflush(stdout);
}

void TokenPrinter::Finish(FinishReason finish, const std::string& matched_stop,
                          size_t prompt_tokens, int64_t completion_tokens) {
  if (output_ != "json") {
    std::printf("\n");
    return;
  }
  std::printf(
      "{\"finish_reason\":\"%s\",\"matched_stop\":%s,\"prompt_tokens\":%zu,"
      "\"completion_tokens\":%lld}\n",
      FinishReasonName(finish), JsonEscape(matched_stop).c_str(), prompt_tokens,
      static_cast<long long>(completion_tokens));
}

}  // namespace walsh
