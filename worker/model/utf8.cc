#include "worker/model/utf8.h"

#include <cstdint>

namespace walsh {
namespace {

// Length of the well-formed character at the start of s, or of its maximal ill-formed subpart
// (negated; at least 1).
int NextChar(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  int need;
  uint8_t lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    need = 1;
  } else if (c >= 0xe0 && c <= 0xef) {
    need = 2;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    need = 3;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -k;  // truncated: the lead and what followed it
    const uint8_t x = b(i + k);
    if (x < lo || x > hi) return -k;
    lo = 0x80;
    hi = 0xbf;
  }
  return need + 1;
}

}  // namespace

std::string SanitizeUtf8(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const int n = NextChar(bytes, i);
    if (n > 0) {
      out.append(bytes.data() + i, static_cast<size_t>(n));
      i += n;
    } else {
      out.append("\xef\xbf\xbd");
      i += -n;
    }
  }
  return out;
}

size_t CompleteUtf8Prefix(absl::string_view bytes) {
  // Only the last three bytes can start an unfinished character.
  for (size_t back = 1; back <= 3 && back <= bytes.size(); ++back) {
    const size_t i = bytes.size() - back;
    const uint8_t c = static_cast<uint8_t>(bytes[i]);
    if ((c & 0xc0) == 0x80) continue;  // continuation byte: look further back
    const int n = NextChar(bytes, i);
    // An ill-formed tail that ran out of input may still be completed.
    if (n < 0 && i + static_cast<size_t>(-n) == bytes.size() && c >= 0xc2 && c <= 0xf4) return i;
    return bytes.size();
  }
  return bytes.size();
}

}  // namespace walsh
