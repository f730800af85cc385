// Incremental detokenizer: token ids in, text out only at UTF-8 character boundaries, so a
// multi-byte character split across tokens never straddles two stream messages. Control
// tokens (<|im_end|> and the like) produce no text, as with skip_special_tokens in vLLM/TGI.
#ifndef WALSH_WORKER_ENGINE_DETOKENIZER_H_
#define WALSH_WORKER_ENGINE_DETOKENIZER_H_

#include <cstdint>
#include <string>

#include "worker/model/tokenizer.h"

namespace walsh {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // The text that became complete with this token (possibly empty).
  std::string Add(int32_t id);
  // Whatever is left at the end; an unfinished character becomes U+FFFD.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_DETOKENIZER_H_
