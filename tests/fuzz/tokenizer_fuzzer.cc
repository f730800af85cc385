// libFuzzer target: arbitrary bytes through the tokenizer (Encode with and without special
// tokens, Decode) and the streaming detokenizer. Invariants: every id is in the vocabulary, and
// the streamed text, piece by piece, is exactly the well-formed UTF-8 of Decode.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_input.h"
#include "worker/engine/detokenizer.h"
#include "worker/model/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace walsh;
  const Tokenizer& tokenizer = fuzz::TinyTokenizer();
  if (size > 4096) return 0;  // the tokenizer is linear; long inputs only slow the search
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool parse_special : {true, false}) {
    const std::vector<int32_t> ids = tokenizer.Encode(text, parse_special);
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) fuzz::Violated("Encode gave an id out of range");
    }
    StreamingDetokenizer detokenizer(tokenizer);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = detokenizer.Add(id);
      if (SanitizeUtf8(piece) != piece) fuzz::Violated("a streamed piece is not UTF-8");
      streamed += piece;
    }
    streamed += detokenizer.Flush();
    if (SanitizeUtf8(streamed) != streamed) fuzz::Violated("the streamed text is not UTF-8");
  }
  // Ids from the input itself, any of them out of range: Decode and the detokenizer must cope.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 4 <= size && raw.size() < 256; i += 4) {
    int32_t id;
    std::memcpy(&id, data + i, 4);
    raw.push_back(id);
  }
  (void)tokenizer.Decode(raw);
  StreamingDetokenizer detokenizer(tokenizer);
  for (int32_t id : raw) (void)detokenizer.Add(id);
  (void)detokenizer.Flush();
  return 0;
}
