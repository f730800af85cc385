#include "constraint/pattern_cursor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

const std::vector<CodepointRange>& Digits() {
  static const auto* d = new std::vector<CodepointRange>{{'0', '9'}};
  return *d;
}
const std::vector<CodepointRange>& Word() {
  static const auto* w =
      new std::vector<CodepointRange>{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return *w;
}
// ECMAScript's WhiteSpace and LineTerminator.
const std::vector<CodepointRange>& Space() {
  static const auto* s = new std::vector<CodepointRange>{
      {0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
      {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  return *s;
}

int HexValue(uint32_t c) {
  if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
  return -1;
}

}  // namespace

std::vector<CodepointRange> Intersect(const std::vector<CodepointRange>& a,
                                      const std::vector<CodepointRange>& b) {
  std::vector<CodepointRange> out;
  for (const CodepointRange& x : a) {
    for (const CodepointRange& y : b) {
      const uint32_t lo = std::max(x.lo, y.lo), hi = std::min(x.hi, y.hi);
      if (lo <= hi) out.push_back({lo, hi});
    }
  }
  return Normalize(std::move(out));
}

absl::StatusOr<PatternCursor> PatternCursor::FromUtf8(absl::string_view text, std::string what) {
  PatternCursor c;
  c.what_ = std::move(what);
  for (size_t i = 0; i < text.size();) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > text.size()) {
      return absl::InvalidArgumentError(absl::StrCat(c.what_, ": ill-formed UTF-8 at byte ", i));
    }
    uint32_t cp = n == 1 ? b : b & (0xFF >> (n + 1));
    for (int k = 1; k < n; ++k) {
      const uint8_t t = static_cast<uint8_t>(text[i + k]);
      if ((t >> 6) != 2) {
        return absl::InvalidArgumentError(absl::StrCat(c.what_, ": ill-formed UTF-8 at byte ", i));
      }
      cp = (cp << 6) | (t & 0x3F);
    }
    const uint32_t min = n == 1 ? 0 : n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return absl::InvalidArgumentError(absl::StrCat(c.what_, ": ill-formed UTF-8 at byte ", i));
    }
    c.cps_.push_back(cp);
    i += n;
  }
  return c;
}

absl::Status PatternCursor::Error(absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat(what_, ": at offset ", pos_, ": ", message));
}

bool PatternCursor::Number(int64_t& value) {
  if (done() || peek() < '0' || peek() > '9') return false;
  value = 0;
  while (!done() && peek() >= '0' && peek() <= '9') {
    value = std::min<int64_t>(value * 10 + (next() - '0'), 1'000'000'000);
  }
  return true;
}

absl::StatusOr<bool> PatternCursor::Quantifier(bool spaced, int64_t& min, int64_t& max) {
  auto blanks = [&] {
    while (spaced && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) next();
  };
  if (Consume('*')) {
    min = 0, max = -1;
  } else if (Consume('+')) {
    min = 1, max = -1;
  } else if (Consume('?')) {
    min = 0, max = 1;
  } else if (peek() == '{' && (spaced || (peek(1) >= '0' && peek(1) <= '9'))) {
    next();
    blanks();
    if (!Number(min)) return Error("expected a number after '{'");
    max = min;
    blanks();
    if (Consume(',')) {
      blanks();
      if (!Number(max)) max = -1;
      blanks();
    }
    if (!Consume('}')) return Error("an unterminated {m,n} quantifier");
  } else {
    return false;
  }
  return true;
}

absl::Status PatternCursor::Escape(bool in_class, std::vector<CodepointRange>& set) {
  if (done()) return Error("a pattern ends in a backslash");
  const uint32_t c = next();
  auto one = [&](uint32_t cp) {
    set.push_back({cp, cp});
    return absl::OkStatus();
  };
  switch (c) {
    case 'd':
      set.insert(set.end(), Digits().begin(), Digits().end());
      return absl::OkStatus();
    case 'w':
      set.insert(set.end(), Word().begin(), Word().end());
      return absl::OkStatus();
    case 's':
      set.insert(set.end(), Space().begin(), Space().end());
      return absl::OkStatus();
    case 'D':
      for (auto r : Complement(Digits())) set.push_back(r);
      return absl::OkStatus();
    case 'W':
      for (auto r : Complement(Word())) set.push_back(r);
      return absl::OkStatus();
    case 'S':
      for (auto r : Complement(Space())) set.push_back(r);
      return absl::OkStatus();
    case 't':
      return one('\t');
    case 'n':
      return one('\n');
    case 'r':
      return one('\r');
    case 'f':
      return one('\f');
    case 'v':
      return one('\v');
    case '0':
      if (peek() >= '0' && peek() <= '9') {
        return Error("octal escapes (\\0 and a digit) are not supported");
      }
      return one(0);
    case 'b':
      if (in_class) return one('\b');
      return Error("word boundaries (\\b) are not supported");
    case 'B':
      return Error("word boundaries (\\B) are not supported");
    case 'p':
    case 'P':
      return Error("Unicode property escapes (\\p, \\P) are not supported");
    case 'k':
      return Error("named backreferences (\\k) are not supported");
    case 'c':
      return Error("control escapes (\\c) are not supported");
    case 'x': {
      const int h = HexValue(peek()), l = HexValue(peek(1));
      if (h < 0 || l < 0) return Error("\\x needs two hex digits");
      pos_ += 2;
      return one(static_cast<uint32_t>(h * 16 + l));
    }
    case 'u': {
      uint32_t cp = 0;
      if (Consume('{')) {
        int digits = 0;
        while (HexValue(peek()) >= 0 && digits < 7) cp = cp * 16 + HexValue(next()), ++digits;
        if (digits == 0 || !Consume('}') || cp > 0x10FFFF) return Error("a bad \\u{...} escape");
      } else {
        for (int k = 0; k < 4; ++k) {
          if (HexValue(peek()) < 0) return Error("\\u needs four hex digits");
          cp = cp * 16 + HexValue(next());
        }
      }
      if (cp >= 0xD800 && cp <= 0xDFFF) return Error("a surrogate codepoint in a \\u escape");
      return one(cp);
    }
    default:
      if (c >= '1' && c <= '9') return Error("backreferences are not supported");
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        return Error(absl::StrCat("an unknown escape \\", std::string(1, static_cast<char>(c))));
      }
      return one(c);  // an escaped punctuation or other character stands for itself
  }
}

absl::Status PatternCursor::Class(std::vector<CodepointRange>& out) {
  const bool negate = Consume('^');
  std::vector<CodepointRange> set;
  while (true) {
    if (done()) return Error("an unterminated character class");
    if (Consume(']')) break;
    std::vector<CodepointRange> item;
    const uint32_t c = next();
    if (c == '\\') {
      if (absl::Status s = Escape(true, item); !s.ok()) return s;
    } else {
      item.push_back({c, c});
    }
    const bool single = item.size() == 1 && item[0].lo == item[0].hi;
    if (single && peek() == '-' && peek(1) != ']' && peek(1) != 0xFFFFFFFF) {
      next();
      std::vector<CodepointRange> to;
      const uint32_t d = next();
      if (d == '\\') {
        if (absl::Status s = Escape(true, to); !s.ok()) return s;
      } else {
        to.push_back({d, d});
      }
      if (to.size() != 1 || to[0].lo != to[0].hi) return Error("a range ends in a class escape");
      if (to[0].lo < item[0].lo) return Error("a character range out of order");
      item[0].hi = to[0].lo;
    }
    set.insert(set.end(), item.begin(), item.end());
  }
  if (negate) set = Complement(std::move(set));
  out.insert(out.end(), set.begin(), set.end());
  return absl::OkStatus();
}

}  // namespace walsh
