// How much of a range of this process's memory the kernel backs with huge pages, read from
// /proc/self/smaps: AnonHugePages for anonymous memory, FilePmdMapped (and ShmemPmdMapped) for a
// file's pages, Private_Hugetlb and Shared_Hugetlb for hugetlbfs pages (which Rss leaves out).
// This is how walsh reports the weights' huge-page share: measured, never assumed
// (docs/operations.md "Weights in memory"). A mapping's pages count only once resident, so the
// share of file-backed weights grows as a run touches them.
#ifndef WALSH_COMMON_HUGE_PAGE_SHARE_H_
#define WALSH_COMMON_HUGE_PAGE_SHARE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walsh {

struct HugePageShare {
  int64_t resident_bytes = 0;   // Rss of the mappings inside the range
  int64_t huge_page_bytes = 0;  // of which in huge pages
};

// The share over [begin, end) from smaps text: each mapping that overlaps the range counts with
// its totals, clamped to the overlap (smaps gives no finer split).
HugePageShare HugePageShareInSmaps(absl::string_view smaps, uintptr_t begin, uintptr_t end);

// The same from this process's /proc/self/smaps; UNAVAILABLE where it cannot be read.
absl::StatusOr<HugePageShare> HugePageShareOf(const void* begin, size_t size);

}  // namespace walsh

#endif  // WALSH_COMMON_HUGE_PAGE_SHARE_H_
