// libFuzzer target: arbitrary bytes as the JSON chat messages a client sends, then ChatML
// rendering and tokenization. Anything may be refused; what is accepted renders as ChatML.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_input.h"
#include "worker/engine/chat_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace walsh;
  if (size > 8192) return 0;
  fuzz::FuzzInput in(data, size);
  const bool thinking = in.Byte() & 1;
  auto messages = ParseChatMessagesJson(in.Rest());
  if (!messages.ok()) return 0;
  auto prompt = FormatChatMl(*messages, thinking);
  if (!prompt.ok()) return 0;
  if (prompt->rfind("<|im_start|>", 0) != 0) fuzz::Violated("a rendered chat is not ChatML");
  (void)fuzz::TinyTokenizer().Encode(*prompt);
  return 0;
}
