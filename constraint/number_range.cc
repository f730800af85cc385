#include "constraint/number_range.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace walsh {
namespace {

constexpr int kMaxDigits = 16;
constexpr int64_t kLargest = 9'999'999'999'999'999;  // 16 nines

std::string DigitClass(char a, char b) {
  if (a == b) return std::string(1, a);
  if (a == '0' && b == '9') return "\\d";
  return absl::StrCat("[", std::string(1, a), "-", std::string(1, b), "]");
}

// Digit strings of equal width from a to b (a <= b), leading zeros allowed.
std::string FixedWidth(const std::string& a, const std::string& b) {
  if (a.empty()) return "";
  if (a.find_first_not_of('0') == std::string::npos &&
      b.find_first_not_of('9') == std::string::npos) {
    return a.size() == 1 ? "\\d" : absl::StrCat("\\d{", a.size(), "}");
  }
  if (a.size() == 1) return DigitClass(a[0], b[0]);
  const std::string ra = a.substr(1), rb = b.substr(1);
  if (a[0] == b[0]) return absl::StrCat(std::string(1, a[0]), FixedWidth(ra, rb));
  std::vector<std::string> alts;
  const std::string zeros(ra.size(), '0'), nines(ra.size(), '9');
  alts.push_back(absl::StrCat(std::string(1, a[0]), "(", FixedWidth(ra, nines), ")"));
  if (b[0] - a[0] > 1) {
    alts.push_back(absl::StrCat(DigitClass(a[0] + 1, b[0] - 1), "\\d{", ra.size(), "}"));
  }
  alts.push_back(absl::StrCat(std::string(1, b[0]), "(", FixedWidth(zeros, rb), ")"));
  return absl::StrCat("(", absl::StrJoin(alts, "|"), ")");
}

// Positive integers in [a, b], 1 <= a <= b <= kLargest.
std::string Positive(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  std::string sa = std::to_string(a);
  const std::string sb = std::to_string(b);
  while (sa.size() < sb.size()) {
    alts.push_back(FixedWidth(sa, std::string(sa.size(), '9')));
    sa = "1" + std::string(sa.size(), '0');
  }
  alts.push_back(FixedWidth(sa, sb));
  return absl::StrCat("(", absl::StrJoin(alts, "|"), ")");
}

}  // namespace

std::string IntegerRangeRegex(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const int64_t l = std::max(lo.value_or(-kLargest), -kLargest);
  const int64_t h = std::min(hi.value_or(kLargest), kLargest);
  if (l > h) return "";
  std::vector<std::string> alts;
  if (l < 0) alts.push_back(absl::StrCat("-", Positive(std::max<int64_t>(1, -h), -l)));
  if (l <= 0 && h >= 0) alts.push_back("0");
  if (h > 0) alts.push_back(Positive(std::max<int64_t>(1, l), h));
  return absl::StrCat("(", absl::StrJoin(alts, "|"), ")");
}

std::string NumberRangeRegex(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const std::string integers = IntegerRangeRegex(lo, hi);
  if (integers.empty()) return "";
  std::vector<std::string> alts{integers};
  const std::string fraction = absl::StrCat("\\.\\d{1,", kMaxDigits, "}");
  const int64_t l = std::max(lo.value_or(-kLargest), -kLargest);
  const int64_t h = std::min(hi.value_or(kLargest), kLargest);
  // n.ddd for n >= 0 lies in (n, n + 1): needs n >= l and n + 1 <= h.
  if (h >= 1 && std::max<int64_t>(l, 0) <= h - 1) {
    alts.push_back(absl::StrCat(IntegerRangeRegex(std::max<int64_t>(l, 0), h - 1), fraction));
  }
  // -m.ddd for m >= 1 lies in (-m - 1, -m): needs -m - 1 >= l and -m <= h.
  if (l <= -2 && std::max<int64_t>(1, -h) <= -l - 1) {
    alts.push_back(
        absl::StrCat("-", IntegerRangeRegex(std::max<int64_t>(1, -h), -l - 1), fraction));
  }
  return absl::StrCat("(", absl::StrJoin(alts, "|"), ")");
}

}  // namespace walsh
