#include "worker/engine/kv_page_pool.h"

#include "absl/strings/str_cat.h"

namespace walsh {

KvPagePool::KvPagePool(int64_t pages, int64_t page_size) : pages_(pages), page_size_(page_size) {
  for (int64_t p = pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

absl::StatusOr<std::vector<int32_t>> KvPagePool::Allocate(int64_t n) {
  if (n > static_cast<int64_t>(free_.size())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache: ", n, " pages needed, ", free_.size(), " of ", pages_, " free"));
  }
  std::vector<int32_t> out(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  return out;
}

void KvPagePool::Release(const std::vector<int32_t>& pages) {
  free_.insert(free_.end(), pages.begin(), pages.end());
}

}  // namespace walsh
