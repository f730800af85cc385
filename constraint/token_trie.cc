#include "constraint/token_trie.h"

#include <algorithm>

namespace walsh {

TokenTrie::TokenTrie(const std::vector<std::string>& tokens)
    : vocab_size_(static_cast<int64_t>(tokens.size())), bytes_(tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!tokens[i].empty()) sorted_.push_back(static_cast<int32_t>(i));
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b);
  });
  // Depth first over ranges of the sorted tokens: a node covers the tokens that share its
  // prefix, its own tokens (those that end there) sort first, and its children follow in byte
  // order, so every subtree is a contiguous range of nodes.
  struct Walk {
    int32_t first, last;
    size_t depth;
    uint8_t byte;
    int32_t index;  // in nodes_ once visited
  };
  std::vector<Walk> walk{{0, static_cast<int32_t>(sorted_.size()), 0, 0, -1}};
  std::vector<Walk> kids;
  while (!walk.empty()) {
    Walk& w = walk.back();
    if (w.index >= 0) {
      nodes_[w.index].end = static_cast<int32_t>(nodes_.size());
      walk.pop_back();
      continue;
    }
    w.index = static_cast<int32_t>(nodes_.size());
    int32_t i = w.first;
    while (i < w.last && bytes_[sorted_[i]].size() == w.depth) ++i;
    nodes_.push_back({w.byte, 0, w.first, i, w.last});
    const size_t depth = w.depth;
    const int32_t last = w.last;
    kids.clear();
    while (i < last) {
      const uint8_t b = static_cast<uint8_t>(bytes_[sorted_[i]][depth]);
      int32_t j = i;
      while (j < last && static_cast<uint8_t>(bytes_[sorted_[j]][depth]) == b) ++j;
      kids.push_back({i, j, depth + 1, b, -1});
      i = j;
    }
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) walk.push_back(*it);
  }
}

}  // namespace walsh
