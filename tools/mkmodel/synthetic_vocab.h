// A real byte-level BPE vocabulary for synthetic models: the 256 byte tokens, merges learned
// from a small built-in corpus (then systematic filler merges up to the size asked for), and
// the Qwen special tokens at the same offsets after the regular tokens as in docs/format.md §9.
#ifndef WALSH_TOOLS_MKMODEL_SYNTHETIC_VOCAB_H_
#define WALSH_TOOLS_MKMODEL_SYNTHETIC_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

namespace walsh {

// llama.cpp token types.
enum TokenType : int32_t {
  kTokenNormal = 1,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
};

struct SyntheticVocab {
  std::vector<std::string> tokens;  // byte-level spelling
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;  // "left right", rank = index
  int64_t endoftext_id = 0;         // first special token
  int64_t im_start_id = 0;
  int64_t im_end_id = 0;
  int64_t pad_id = 0;
  int64_t think_id = 0;
  int64_t end_think_id = 0;
};

// `regular` >= 256 tokens (bytes + merges), then 34 specials, then padding up to `vocab_size`.
SyntheticVocab BuildSyntheticVocab(int64_t regular, int64_t vocab_size);

// A ChatML chat template in the Qwen form (Jinja), stored as tokenizer.chat_template.
const char* ChatMlTemplate();

}  // namespace walsh

#endif  // WALSH_TOOLS_MKMODEL_SYNTHETIC_VOCAB_H_
