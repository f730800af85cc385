// The bookkeeping of the paged KV cache for the full-attention layers: fixed-size pages from one
// shared pool, whose storage the backend holds (backend.h). A page holds `page_size` positions of
// K and V for every attention layer, so a sequence needs one page table. Running out of pages is
// an error the caller sees, never a crash.
#ifndef WALSH_WORKER_ENGINE_KV_PAGE_POOL_H_
#define WALSH_WORKER_ENGINE_KV_PAGE_POOL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace walsh {

class KvPagePool {
 public:
  KvPagePool(int64_t pages, int64_t page_size);

  // kv_dim: values of K (and of V) per position and layer, each value_bytes long.
  // row_bytes: one position's K (or V) row of one layer.
  static int64_t PageBytes(int64_t page_size, int64_t layers, int64_t row_bytes) {
    return page_size * layers * 2 * row_bytes;
  }

  int64_t page_size() const { return page_size_; }
  int64_t total() const { return static_cast<int64_t>(pages_); }
  int64_t used() const { return total() - static_cast<int64_t>(free_.size()); }
  int64_t free() const { return static_cast<int64_t>(free_.size()); }

  // Takes `n` pages at once, or none (RESOURCE_EXHAUSTED).
  absl::StatusOr<std::vector<int32_t>> Allocate(int64_t n);
  void Release(const std::vector<int32_t>& pages);

 private:
  int64_t pages_, page_size_;
  std::vector<int32_t> free_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_KV_PAGE_POOL_H_
