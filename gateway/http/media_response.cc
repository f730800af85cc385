#include "gateway/http/media_response.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace walsh {
namespace {

absl::Status Failed(absl::string_view why) { return absl::UnavailableError(why); }

}  // namespace

absl::StatusOr<std::optional<ResponseHead>> ParseResponseHead(absl::string_view bytes) {
  const size_t end = bytes.find("\r\n\r\n");
  if (end == absl::string_view::npos || end + 4 > kMaxResponseHeadBytes) {
    if (bytes.size() > kMaxResponseHeadBytes) return Failed("the answer's headers pass 64 KiB");
    return std::nullopt;
  }
  ResponseHead head;
  head.size = end + 4;
  std::vector<absl::string_view> lines = absl::StrSplit(bytes.substr(0, end), "\r\n");
  absl::string_view status = lines[0];
  if (!absl::ConsumePrefix(&status, "HTTP/1.") || status.size() < 5 || status[1] != ' ' ||
      !absl::ascii_isdigit(status[0]) || !absl::ascii_isdigit(status[2]) ||
      !absl::ascii_isdigit(status[3]) || !absl::ascii_isdigit(status[4]) ||
      (status.size() > 5 && status[5] != ' ')) {
    return Failed("the answer is not HTTP/1.x");
  }
  head.status = (status[2] - '0') * 100 + (status[3] - '0') * 10 + (status[4] - '0');
  if (head.status < 100 || head.status > 599) return Failed("the answer is not HTTP/1.x");
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos || colon == 0) return Failed("a malformed header line");
    std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    const std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    auto [it, fresh] = head.headers.emplace(std::move(name), value);
    if (!fresh) absl::StrAppend(&it->second, ", ", value);
  }
  return head;
}

absl::StatusOr<std::string> Dechunk(absl::string_view body, int64_t max_bytes) {
  std::string out;
  for (;;) {
    const size_t eol = body.find("\r\n");
    if (eol == absl::string_view::npos) return Failed("the chunked body ends early");
    absl::string_view size_text = body.substr(0, eol);
    if (const size_t semi = size_text.find(';'); semi != absl::string_view::npos) {
      size_text = size_text.substr(0, semi);
    }
    size_text = absl::StripAsciiWhitespace(size_text);
    uint64_t size = 0;
    if (size_text.empty() || size_text.size() > 15) return Failed("a malformed chunk size");
    for (char c : size_text) {
      if (!absl::ascii_isxdigit(c)) return Failed("a malformed chunk size");
      size = size * 16 + static_cast<uint64_t>(
                             absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10);
    }
    body.remove_prefix(eol + 2);
    if (size == 0) return out;
    if (body.size() < size + 2 || body.substr(size, 2) != "\r\n") {
      return Failed("the chunked body ends early");
    }
    if (out.size() + size > static_cast<uint64_t>(max_bytes)) {
      return absl::ResourceExhaustedError("the chunked body passes the byte limit");
    }
    out.append(body.data(), size);
    body.remove_prefix(size + 2);
  }
}

}  // namespace walsh
