// Paged KV cache for the full-attention layers: fixed-size pages from one shared pool. A page
// holds `page_size` positions of K and V for every attention layer, so a sequence needs one
// page table. Running out of pages is an error the caller sees, never a crash.
#ifndef WALSH_WORKER_ENGINE_KV_PAGE_POOL_H_
#define WALSH_WORKER_ENGINE_KV_PAGE_POOL_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace walsh {

class KvPagePool {
 public:
  // kv_dim: floats of K (and of V) per position and layer.
  KvPagePool(int64_t pages, int64_t page_size, int64_t layers, int64_t kv_dim);

  static int64_t PageBytes(int64_t page_size, int64_t layers, int64_t kv_dim) {
    return page_size * layers * 2 * kv_dim * static_cast<int64_t>(sizeof(float));
  }

  int64_t page_size() const { return page_size_; }
  bool allocated() const { return storage_ != nullptr; }
  int64_t total() const { return static_cast<int64_t>(pages_); }
  int64_t used() const { return total() - static_cast<int64_t>(free_.size()); }
  int64_t free() const { return static_cast<int64_t>(free_.size()); }

  // Takes `n` pages at once, or none (RESOURCE_EXHAUSTED).
  absl::StatusOr<std::vector<int32_t>> Allocate(int64_t n);
  void Release(const std::vector<int32_t>& pages);

  // Row of `layer`'s K (or V) at position `slot` (0..page_size) of `page`.
  float* K(int32_t page, int64_t layer) { return Base(page, layer); }
  float* V(int32_t page, int64_t layer) { return Base(page, layer) + page_size_ * kv_dim_; }
  int64_t kv_dim() const { return kv_dim_; }

 private:
  float* Base(int32_t page, int64_t layer) {
    return storage_.get() + (page * layers_ + layer) * 2 * page_size_ * kv_dim_;
  }

  int64_t pages_, page_size_, layers_, kv_dim_;
  // calloc: the kernel hands out zeroed pages lazily, so an unused budget costs nothing.
  std::unique_ptr<float, void (*)(void*)> storage_{nullptr, &std::free};
  std::vector<int32_t> free_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_KV_PAGE_POOL_H_
