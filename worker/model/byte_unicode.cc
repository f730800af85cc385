#include "worker/model/byte_unicode.h"

#include <array>

#include "absl/container/flat_hash_map.h"

namespace walsh {
namespace {

std::string EncodeUtf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    s.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
  return s;
}

struct Tables {
  std::array<std::string, 256> to_unicode;
  absl::flat_hash_map<std::string, uint8_t> to_byte;

  Tables() {
    // Printable bytes map to themselves; the rest to 256, 257, ... in byte order (GPT-2).
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
      to_unicode[b] = EncodeUtf8(printable ? static_cast<uint32_t>(b) : next++);
      to_byte[to_unicode[b]] = static_cast<uint8_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables* tables = new Tables();
  return *tables;
}

}  // namespace

const std::string& ByteToUnicode(uint8_t b) { return GetTables().to_unicode[b]; }

std::string BytesToTokenText(absl::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) out += ByteToUnicode(c);
  return out;
}

std::optional<std::string> TokenTextToBytes(absl::string_view text) {
  const Tables& t = GetTables();
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    const size_t len = lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
    if (i + len > text.size()) return std::nullopt;
    auto it = t.to_byte.find(std::string(text.substr(i, len)));
    if (it == t.to_byte.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
    i += len;
  }
  return out;
}

}  // namespace walsh
