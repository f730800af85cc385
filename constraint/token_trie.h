// The vocabulary as a trie over token bytes, built once per model and shared by every
// constraint: a mask is computed by walking it, so tokens that share a prefix share the work
// and a dead prefix rules out its whole subtree at once. Tokens given as "" are not in it
// (control tokens: a constraint never allows them; EOS is decided apart).
#ifndef WALSH_CONSTRAINT_TOKEN_TRIE_H_
#define WALSH_CONSTRAINT_TOKEN_TRIE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace walsh {

class TokenTrie {
 public:
  struct Node {
    uint8_t byte = 0;
    int32_t end = 0;      // one past the last node of this subtree (nodes are in DFS order)
    int32_t first = 0;    // this subtree's tokens: sorted()[first, last)
    int32_t own_end = 0;  // sorted()[first, own_end) end exactly here
    int32_t last = 0;
  };

  // `tokens[id]` is token id's bytes; an empty string leaves the id out.
  explicit TokenTrie(const std::vector<std::string>& tokens);

  int64_t vocab_size() const { return vocab_size_; }
  const std::vector<Node>& nodes() const { return nodes_; }       // nodes()[0] is the root
  const std::vector<int32_t>& sorted() const { return sorted_; }  // ids by their bytes
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool contains(int32_t id) const { return !bytes_[id].empty(); }

 private:
  int64_t vocab_size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<int32_t> sorted_;
  std::vector<Node> nodes_;
};

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_TOKEN_TRIE_H_
