// The token trie of a model's tokenizer: every token's bytes, control tokens (EOS, the chat
// markers) left out: a constraint never produces them. User-defined tokens such as <tool_call>
// stay, spelled as their text, so a forced tool call can use the model's own token.
#ifndef WALSH_WORKER_MODEL_TOKENIZER_TRIE_H_
#define WALSH_WORKER_MODEL_TOKENIZER_TRIE_H_

#include <memory>

#include "constraint/token_trie.h"
#include "worker/model/tokenizer.h"

namespace walsh {

std::shared_ptr<const TokenTrie> TokenizerTrie(const Tokenizer& tokenizer);

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_TOKENIZER_TRIE_H_
