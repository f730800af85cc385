// The GPT-2 byte <-> unicode mapping that byte-level BPE vocabularies are written in: each of
// the 256 bytes is one printable code point, so every token is a valid UTF-8 string.
#ifndef WALSH_WORKER_MODEL_BYTE_UNICODE_H_
#define WALSH_WORKER_MODEL_BYTE_UNICODE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace walsh {

// The UTF-8 encoding of the code point that stands for byte b.
const std::string& ByteToUnicode(uint8_t b);

// Maps raw bytes to their byte-level token spelling ("a b" -> "aĠb").
std::string BytesToTokenText(absl::string_view bytes);

// Maps a token spelling back to raw bytes; nullopt if a code point is not one of the 256.
std::optional<std::string> TokenTextToBytes(absl::string_view text);

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_BYTE_UNICODE_H_
