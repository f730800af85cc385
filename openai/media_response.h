// An origin's HTTP/1.x answer to an image fetch (MediaFetcher): its head (status line and
// headers) and a chunked body decoded. Untrusted bytes: tests/fuzz/media_response_fuzzer.cc.
#ifndef WALSH_OPENAI_MEDIA_RESPONSE_H_
#define WALSH_OPENAI_MEDIA_RESPONSE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walsh {

inline constexpr size_t kMaxResponseHeadBytes = 64 << 10;

struct ResponseHead {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case; repeats joined by ", "
  size_t size = 0;                             // bytes up to the body
};

// The status line and headers, once `bytes` holds them whole; nullopt before. UNAVAILABLE for
// a head that is not HTTP/1.x, or not whole within kMaxResponseHeadBytes.
absl::StatusOr<std::optional<ResponseHead>> ParseResponseHead(absl::string_view bytes);

// A chunked body's bytes (trailers, if any, are not read). UNAVAILABLE for a malformed or cut
// short body; RESOURCE_EXHAUSTED past `max_bytes`.
absl::StatusOr<std::string> Dechunk(absl::string_view body, int64_t max_bytes);

// Whether `body`, a chunked body as far as it has arrived, is whole: its last chunk and trailers
// are in it. Resumes from `*at` (0 at first; the offset of the first chunk not yet passed), so
// calls after each read cost the new bytes only. UNAVAILABLE for framing that is malformed, or a
// size line or trailer section past 4 KiB.
absl::StatusOr<bool> ChunkedBodyWhole(absl::string_view body, size_t* at);

}  // namespace walsh

#endif  // WALSH_OPENAI_MEDIA_RESPONSE_H_
