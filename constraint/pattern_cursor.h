// Reading a pattern (a regular expression or an EBNF grammar) codepoint by codepoint, with the
// escapes and character classes both languages share. Errors name the codepoint offset.
#ifndef WALSH_CONSTRAINT_PATTERN_CURSOR_H_
#define WALSH_CONSTRAINT_PATTERN_CURSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "constraint/grammar.h"

namespace walsh {

// How deeply a pattern's groups may nest: both parsers recurse once per level.
inline constexpr int kMaxGroupNesting = 64;

class PatternCursor {
 public:
  // Refuses ill-formed UTF-8.
  static absl::StatusOr<PatternCursor> FromUtf8(absl::string_view text, std::string what);

  bool done() const { return pos_ >= cps_.size(); }
  uint32_t peek(size_t ahead = 0) const {
    return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : 0xFFFFFFFF;
  }
  uint32_t next() { return cps_[pos_++]; }
  bool Consume(uint32_t c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  size_t pos() const { return pos_; }
  absl::Status Error(absl::string_view message) const;

  // After a backslash: one codepoint, or a class escape (\d \D \w \W \s \S). `in_class`: \b is
  // a backspace there; outside a class word boundaries and backreferences are refused by name.
  absl::Status Escape(bool in_class, std::vector<CodepointRange>& set);
  // After '[': a class up to and including its ']'; a leading '^' complements it.
  absl::Status Class(std::vector<CodepointRange>& set);
  // Decimal digits; false when there are none.
  bool Number(int64_t& value);
  // A postfix quantifier: * + ? {m} {m,} {m,n} as [min, max] (max -1: unbounded); false when
  // none is here. `spaced`: blanks may stand inside braces, and '{' always starts one (EBNF);
  // else '{' starts one only before a digit (a regex's literal '{').
  absl::StatusOr<bool> Quantifier(bool spaced, int64_t& min, int64_t& max);

 private:
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
  std::string what_;  // "regex", "grammar"
};

std::vector<CodepointRange> Intersect(const std::vector<CodepointRange>& a,
                                      const std::vector<CodepointRange>& b);

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_PATTERN_CURSOR_H_
