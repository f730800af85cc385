// UTF-8 helpers shared by the tokenizer and the streaming detokenizer.
#ifndef WALSH_WORKER_MODEL_UTF8_H_
#define WALSH_WORKER_MODEL_UTF8_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace walsh {

// Replaces every ill-formed sequence with U+FFFD, one per maximal subpart (the WHATWG /
// Unicode "best practice" that browsers' and Node's TextDecoder follow).
std::string SanitizeUtf8(absl::string_view bytes);

// Length of the longest prefix of `bytes` that does not end inside a multi-byte character
// that could still be completed by more bytes.
size_t CompleteUtf8Prefix(absl::string_view bytes);

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_UTF8_H_
