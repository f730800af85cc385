#include "worker/model/tokenizer_trie.h"

#include <string>
#include <vector>

namespace walsh {

std::shared_ptr<const TokenTrie> TokenizerTrie(const Tokenizer& tokenizer) {
  std::vector<std::string> tokens(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.IsControl(id)) tokens[id] = tokenizer.TokenBytes(id);
  }
  return std::make_shared<const TokenTrie>(tokens);
}

}  // namespace walsh
