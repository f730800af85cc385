#include "openai/media_response.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace walsh {
namespace {

// The fetched answer is not one the gateway can read: the fetch failed, as a transport error would.
absl::Status BadAnswer(absl::string_view why) { return absl::UnavailableError(why); }

// A chunk's size line (without its CRLF): the hex size before any extension.
absl::StatusOr<uint64_t> ChunkSize(absl::string_view line) {
  if (const size_t semi = line.find(';'); semi != absl::string_view::npos) {
    line = line.substr(0, semi);
  }
  line = absl::StripAsciiWhitespace(line);
  uint64_t size = 0;
  if (line.empty() || line.size() > 15) return BadAnswer("a malformed chunk size");
  for (char c : line) {
    if (!absl::ascii_isxdigit(c)) return BadAnswer("a malformed chunk size");
    size = size * 16 + static_cast<uint64_t>(
                           absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10);
  }
  return size;
}

}  // namespace

absl::StatusOr<std::optional<ResponseHead>> ParseResponseHead(absl::string_view bytes) {
  const size_t end = bytes.find("\r\n\r\n");
  if (end == absl::string_view::npos || end + 4 > kMaxResponseHeadBytes) {
    if (bytes.size() > kMaxResponseHeadBytes) return BadAnswer("the answer's headers pass 64 KiB");
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
    return BadAnswer("the answer is not HTTP/1.x");
  }
  head.status = (status[2] - '0') * 100 + (status[3] - '0') * 10 + (status[4] - '0');
  if (head.status < 100 || head.status > 599) return BadAnswer("the answer is not HTTP/1.x");
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos || colon == 0) return BadAnswer("a malformed header line");
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
    if (eol == absl::string_view::npos) return BadAnswer("the chunked body ends early");
    absl::StatusOr<uint64_t> parsed = ChunkSize(body.substr(0, eol));
    if (!parsed.ok()) return parsed.status();
    const uint64_t size = *parsed;
    body.remove_prefix(eol + 2);
    if (size == 0) return out;
    if (body.size() < size + 2 || body.substr(size, 2) != "\r\n") {
      return BadAnswer("the chunked body ends early");
    }
    if (out.size() + size > static_cast<uint64_t>(max_bytes)) {
      return absl::ResourceExhaustedError("the chunked body passes the byte limit");
    }
    out.append(body.data(), size);
    body.remove_prefix(size + 2);
  }
}

absl::StatusOr<bool> ChunkedBodyWhole(absl::string_view body, size_t* at) {
  for (;;) {
    const absl::string_view rest = body.substr(std::min(*at, body.size()));
    const size_t eol = rest.find("\r\n");
    if (eol == absl::string_view::npos) {
      if (rest.size() > 4096) return BadAnswer("a chunk size line passes 4 KiB");
      return false;
    }
    absl::StatusOr<uint64_t> size = ChunkSize(rest.substr(0, eol));
    if (!size.ok()) return size.status();
    if (*size == 0) {
      // The trailer section ends at an empty line: at once, or after trailer lines.
      const absl::string_view trailers = rest.substr(eol + 2);
      if (absl::StartsWith(trailers, "\r\n")) return true;
      if (trailers.find("\r\n\r\n") != absl::string_view::npos) return true;
      if (trailers.size() > 4096) return BadAnswer("the chunked body's trailers pass 4 KiB");
      return false;
    }
    if (rest.size() < eol + 2 + *size + 2) return false;
    if (rest.substr(eol + 2 + *size, 2) != "\r\n") return BadAnswer("a chunk without its CRLF");
    *at += eol + 2 + *size + 2;
  }
}

}  // namespace walsh
