#include "common/huge_page_share.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace walsh {
namespace {

// "7f12a000-7f12b000 r--p ...": a mapping's header, its range parsed.
bool ParseHeader(absl::string_view line, uintptr_t* lo, uintptr_t* hi) {
  const size_t dash = line.find('-'), space = line.find(' ');
  if (dash == absl::string_view::npos || space == absl::string_view::npos || dash > space) {
    return false;
  }
  uint64_t a = 0, b = 0;
  if (!absl::SimpleHexAtoi(line.substr(0, dash), &a) ||
      !absl::SimpleHexAtoi(line.substr(dash + 1, space - dash - 1), &b)) {
    return false;
  }
  *lo = static_cast<uintptr_t>(a);
  *hi = static_cast<uintptr_t>(b);
  return true;
}

// "AnonHugePages:      2048 kB" -> bytes, if the line is field `name`.
bool ParseField(absl::string_view line, absl::string_view name, int64_t* bytes) {
  if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, ":")) return false;
  line = absl::StripAsciiWhitespace(line);
  if (!absl::ConsumeSuffix(&line, "kB")) return false;
  int64_t kb = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kb)) return false;
  *bytes = kb * 1024;
  return true;
}

}  // namespace

HugePageShare HugePageShareInSmaps(absl::string_view smaps, uintptr_t begin, uintptr_t end) {
  HugePageShare share;
  bool inside = false;
  int64_t overlap = 0;
  for (absl::string_view line : absl::StrSplit(smaps, '\n')) {
    uintptr_t lo = 0, hi = 0;
    if (ParseHeader(line, &lo, &hi)) {
      inside = lo < end && begin < hi;
      overlap = inside ? static_cast<int64_t>(std::min(hi, end) - std::max(lo, begin)) : 0;
      continue;
    }
    if (!inside) continue;
    int64_t bytes = 0;
    if (ParseField(line, "Rss", &bytes)) {
      share.resident_bytes += std::min(bytes, overlap);
    } else if (ParseField(line, "Private_Hugetlb", &bytes) ||
               ParseField(line, "Shared_Hugetlb", &bytes)) {
      // hugetlbfs pages are outside Rss: they count as resident and huge both.
      share.resident_bytes += std::min(bytes, overlap);
      share.huge_page_bytes += std::min(bytes, overlap);
    } else if (ParseField(line, "AnonHugePages", &bytes) ||
               ParseField(line, "FilePmdMapped", &bytes) ||
               ParseField(line, "ShmemPmdMapped", &bytes)) {
      share.huge_page_bytes += std::min(bytes, overlap);
    }
  }
  share.huge_page_bytes = std::min(share.huge_page_bytes, share.resident_bytes);
  return share;
}

absl::StatusOr<HugePageShare> HugePageShareOf(const void* begin, size_t size) {
  std::ifstream in("/proc/self/smaps");
  if (!in) return absl::UnavailableError("cannot read /proc/self/smaps");
  // The kernel writes smaps as it is read, mapping by mapping in address order: stop at the
  // first mapping past the range rather than walk the page tables of every other one.
  const uintptr_t lo = reinterpret_cast<uintptr_t>(begin), hi = lo + size;
  std::string text, line;
  while (std::getline(in, line)) {
    uintptr_t start = 0, end = 0;
    if (ParseHeader(line, &start, &end) && start >= hi) break;
    text.append(line).push_back('\n');
  }
  return HugePageShareInSmaps(text, lo, hi);
}

}  // namespace walsh
