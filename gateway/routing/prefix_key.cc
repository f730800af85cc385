#include "gateway/routing/prefix_key.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace walsh {

int64_t AffinityWindow(int64_t page_size, int64_t min_tokens) {
  if (page_size < 1 || min_tokens < 1) return kDefaultAffinityWindow;
  // Never more than min_tokens: two prompts sharing that many may share a snapshot.
  const int64_t whole_pages = min_tokens / page_size * page_size;
  return whole_pages > 0 ? whole_pages : min_tokens;
}

uint64_t PrefixAffinityKey(const v1::GenerateRequest& r, int64_t window) {
  std::string key;
  if (r.has_tokens()) {
    for (int i = 0; i < r.tokens().ids_size() && i < window; ++i) {
      absl::StrAppend(&key, r.tokens().ids(i), ",");
    }
  } else if (r.has_chat()) {
    for (const auto& m : r.chat().messages()) {
      absl::StrAppend(&key, m.role(), ":", m.content(), "\n");
      if (static_cast<int64_t>(key.size()) >= window) break;
    }
    key.resize(std::min<size_t>(key.size(), window));
  } else if (r.has_pieces()) {  // the HTTP face's chats: the rendered text, as for `text`
    for (const auto& p : r.pieces().pieces()) {
      key += p.text();
      if (static_cast<int64_t>(key.size()) >= window) break;
    }
    key.resize(std::min<size_t>(key.size(), window));
  } else {
    key = r.text().substr(0, window);
  }
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace walsh
