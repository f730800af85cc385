// Zeroed memory straight from the kernel (an anonymous private mapping), unmapped when the object
// goes away. Pages are zero-filled on first touch, so an unused budget costs no time and no
// resident memory, whatever the allocator (a calloc is zeroed by hand under ThreadSanitizer, and
// its shadow with it: seconds per engine). A guard page on each side faults on a run off either
// end in every build, and under AddressSanitizer the slack up to the last page is poisoned, so
// an overrun is caught as it would be past a calloc. Memory walked every step (the KV cache and
// the GatedDeltaNet state, as the weights) may ask for transparent huge pages: it then starts on
// a 2 MiB boundary and is advised MADV_HUGEPAGE, faulting in 2 MiB at a time where THP allows.
#ifndef WALSH_COMMON_ZEROED_PAGES_H_
#define WALSH_COMMON_ZEROED_PAGES_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace walsh {

class ZeroedPages {
 public:
  ZeroedPages() = default;
  enum class Pages { kSmall, kHuge };
  // `bytes` zeroed bytes (at least one), or RESOURCE_EXHAUSTED naming `what` and the size.
  static absl::StatusOr<ZeroedPages> Map(size_t bytes, const char* what,
                                         Pages pages = Pages::kSmall);
  ~ZeroedPages();
  ZeroedPages(ZeroedPages&& other) noexcept;
  ZeroedPages& operator=(ZeroedPages&& other) noexcept;
  ZeroedPages(const ZeroedPages&) = delete;
  ZeroedPages& operator=(const ZeroedPages&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  ZeroedPages(uint8_t* data, size_t size, void* mapping, size_t mapped)
      : data_(data), size_(size), mapping_(mapping), mapped_(mapped) {}
  void Unmap();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // the whole mapping, guard pages included
  size_t mapped_ = 0;
};

}  // namespace walsh

#endif  // WALSH_COMMON_ZEROED_PAGES_H_
