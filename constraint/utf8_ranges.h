// A codepoint range as the UTF-8 byte sequences that encode exactly it: each sequence is a list
// of byte ranges, one per byte (the split RE2 and Rust's regex-syntax use). Surrogates are not
// encodable and are left out.
#ifndef WALSH_CONSTRAINT_UTF8_RANGES_H_
#define WALSH_CONSTRAINT_UTF8_RANGES_H_

#include <cstdint>
#include <vector>

#include "constraint/grammar.h"

namespace walsh {

std::vector<std::vector<ByteRange>> Utf8Sequences(uint32_t lo, uint32_t hi);

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_UTF8_RANGES_H_
