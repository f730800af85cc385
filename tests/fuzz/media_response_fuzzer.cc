// libFuzzer target: arbitrary bytes as an origin's answer to an image fetch. The head parser
// and the chunked decoder may refuse (with a message), never crash; what they accept holds
// together (the head's size within the bytes, a body no larger than its framing, a body found
// whole decodes), and any bytes chunked at the input's chosen sizes decode back to themselves and
// are found whole exactly when the last of them has arrived.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "openai/media_response.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace walsh;
  if (size > (1 << 17)) return 0;
  fuzz::FuzzInput in(data, size);
  const int64_t max_bytes = 1 + in.Byte() * 64;
  const size_t chunk = 1 + in.Byte();
  const std::string bytes = in.Rest();

  auto head = ParseResponseHead(bytes);
  if (!head.ok() && head.status().message().empty()) fuzz::Violated("a refusal without a message");
  if (head.ok() && *head) {
    if ((*head)->size > bytes.size() || (*head)->status < 100 || (*head)->status > 599) {
      fuzz::Violated("an accepted head out of its bounds");
    }
  }
  auto body = Dechunk(bytes, max_bytes);
  if (!body.ok() && body.status().message().empty()) fuzz::Violated("a refusal without a message");
  if (body.ok() &&
      (body->size() > bytes.size() || static_cast<int64_t>(body->size()) > max_bytes)) {
    fuzz::Violated("a decoded body larger than its framing or its limit");
  }

  std::string chunked;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    const size_t n = std::min(chunk, bytes.size() - at);
    absl::StrAppend(&chunked, absl::Hex(n), "\r\n", bytes.substr(at, n), "\r\n");
  }
  absl::StrAppend(&chunked, "0\r\n\r\n");
  auto again = Dechunk(chunked, static_cast<int64_t>(bytes.size()));
  if (!again.ok() || *again != bytes) fuzz::Violated("chunked bytes do not decode to themselves");

  // Fed as it arrives, `chunk` bytes at a time, the framing is whole exactly at its end.
  size_t at = 0;
  for (size_t end = chunk;; end += chunk) {
    const size_t e = std::min(end, chunked.size());
    auto whole = ChunkedBodyWhole(absl::string_view(chunked).substr(0, e), &at);
    if (!whole.ok()) fuzz::Violated("well-formed chunked framing refused");
    if (*whole != (e == chunked.size())) fuzz::Violated("chunked framing whole too early or late");
    if (e == chunked.size()) break;
  }
  // What is found whole decodes.
  size_t from = 0;
  auto found = ChunkedBodyWhole(bytes, &from);
  if (found.ok() && *found && !Dechunk(bytes, int64_t{1} << 40).ok()) {
    fuzz::Violated("a body found whole does not decode");
  }
  return 0;
}
