#include "common/zeroed_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

// The compiler's sanitizer header, where it ships one; no-ops without ASan either way.
#if __has_include(<sanitizer/asan_interface.h>)
#include <sanitizer/asan_interface.h>
#endif
#ifndef ASAN_POISON_MEMORY_REGION
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

namespace walsh {

absl::StatusOr<ZeroedPages> ZeroedPages::Map(size_t bytes, const char* what, Pages pages) {
  bytes = std::max<size_t>(bytes, 1);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  constexpr size_t kHugePage = size_t{2} << 20;
  const bool huge = pages == Pages::kHuge && bytes >= kHugePage;
  const size_t body = (bytes + page - 1) / page * page;
  // Huge pages: slack so the body can start on a 2 MiB boundary, a guard page still before it.
  const size_t mapped = body + 2 * page + (huge ? kHugePage : 0);
  auto refused = [&](int error) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", bytes, " bytes of ", what, ": ", std::strerror(error)));
  };
  void* mapping = mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return refused(errno);
  uint8_t* data = static_cast<uint8_t*>(mapping) + page;
  if (huge) {
    data = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(data) + kHugePage - 1) /
                                      kHugePage * kHugePage);
  }
  if (mprotect(data, body, PROT_READ | PROT_WRITE) != 0) {
    const int error = errno;
    munmap(mapping, mapped);
    return refused(error);
  }
  // Advice only: where THP is off the pages stay small, and nothing else changes.
  if (huge) (void)madvise(data, body, MADV_HUGEPAGE);
  ASAN_POISON_MEMORY_REGION(data + bytes, body - bytes);
  return ZeroedPages(data, bytes, mapping, mapped);
}

ZeroedPages::~ZeroedPages() { Unmap(); }

ZeroedPages::ZeroedPages(ZeroedPages&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapped_(std::exchange(other.mapped_, 0)) {}

ZeroedPages& ZeroedPages::operator=(ZeroedPages&& other) noexcept {
  if (this != &other) {
    Unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

void ZeroedPages::Unmap() {
  if (mapping_ != nullptr) {
    // The next mapping at these addresses must not inherit the poisoned slack.
    ASAN_UNPOISON_MEMORY_REGION(mapping_, mapped_);
    munmap(mapping_, mapped_);
  }
  data_ = nullptr;
  size_ = 0;
  mapping_ = nullptr;
  mapped_ = 0;
}

}  // namespace walsh
