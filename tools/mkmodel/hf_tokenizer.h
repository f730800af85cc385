// Converts a Hugging Face tokenizer.json (byte-level BPE) into GGUF tokenizer arrays, so a
// synthetic model can carry a real vocabulary (walsh-mkmodel --tokenizer-json).
#ifndef WALSH_TOOLS_MKMODEL_HF_TOKENIZER_H_
#define WALSH_TOOLS_MKMODEL_HF_TOKENIZER_H_

#include <string>

#include "absl/status/statusor.h"
#include "tools/mkmodel/synthetic_vocab.h"

namespace walsh {

// Tokens by id (added tokens included: special ones as CONTROL, the others as USER_DEFINED),
// merges in rank order, and the ids of <|endoftext|>, <|im_start|>, <|im_end|>.
absl::StatusOr<SyntheticVocab> LoadHfTokenizerJson(const std::string& path);

}  // namespace walsh

#endif  // WALSH_TOOLS_MKMODEL_HF_TOKENIZER_H_
