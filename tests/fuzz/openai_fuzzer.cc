// libFuzzer target: arbitrary bytes as an OpenAI-API request body (both endpoints) and as a
// model's output text for the reasoning and tool-call parser. A body may be refused (always
// 400, never a crash); the parser must give the same result however the text is cut.
#include <cstddef>
#include <cstdint>
#include <string>

#include "openai/api_error.h"
#include "openai/chat_output_parser.h"
#include "openai/media_url.h"
#include "openai/openai_request.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

struct Split {
  std::string reasoning, content, calls;
  void Add(const walsh::ChatDelta& d) {
    reasoning += d.reasoning;
    content += d.content;
    for (const auto& c : d.tool_calls) calls += c.name + "(" + c.arguments + ")";
  }
  bool operator==(const Split& o) const {
    return reasoning == o.reasoning && content == o.content && calls == o.calls;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace walsh;
  if (size > 65536) return 0;
  fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.Byte();
  const size_t piece = 1 + in.Byte() % 7;
  const std::string text = in.Rest();

  for (auto parse : {ParseChatCompletionRequest, ParseCompletionRequest}) {
    auto r = parse(text);
    if (!r.ok() && ApiErrorOf(r.status()).http_status != 400) {
      fuzz::Violated("a refused body is not a 400");
    }
    if (!r.ok()) continue;
    // What the server would fetch is exactly what the host check sees: a normalized URL.
    for (const auto& remote : r->remote_images) {
      auto again = ParseMediaUrl(remote.url.Spec());
      if (!again.ok() || again->Spec() != remote.url.Spec()) {
        fuzz::Violated("a URL to fetch is not in its normal form");
      }
      if (remote.piece < 0 || remote.piece >= r->generate.pieces().pieces_size() ||
          !r->generate.pieces().pieces(remote.piece).image().empty()) {
        fuzz::Violated("a URL to fetch names no empty piece");
      }
    }
  }

  const bool thinking = mode & 1, tools = mode & 2;
  const std::string forced = (mode & 4) ? "f" : "";
  ChatOutputParser whole(thinking, tools, forced), cut(thinking, tools, forced);
  Split a, b;
  a.Add(whole.Feed(text));
  a.Add(whole.Finish());
  for (size_t i = 0; i < text.size(); i += piece) b.Add(cut.Feed(text.substr(i, piece)));
  b.Add(cut.Finish());
  if (!(a == b)) fuzz::Violated("the parser's result depends on how the text was cut");
  return 0;
}
