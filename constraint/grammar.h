// A context-free grammar over bytes: the one form every constraint compiles to (JSON schemas,
// any JSON, regular expressions and EBNF grammars; docs/structured_output.md). A rule is a list
// of alternatives; an alternative is a sequence of elements, each a byte class or a reference to
// a rule. Repetition and character classes beyond ASCII are built from rules by the builder, so
// the matcher sees only these two kinds.
#ifndef WALSH_CONSTRAINT_GRAMMAR_H_
#define WALSH_CONSTRAINT_GRAMMAR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace walsh {

struct ByteRange {
  uint8_t lo = 0, hi = 0;  // inclusive
};

struct GrammarElement {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  int32_t rule = -1;              // kRule
  std::vector<ByteRange> ranges;  // kBytes: sorted, disjoint, not adjacent
};

using GrammarSequence = std::vector<GrammarElement>;

struct GrammarRule {
  std::string name;
  std::vector<GrammarSequence> alternatives;
  bool defined = false;
  // x* built by Repeat: `star ::= x star | ""`. When x can be empty the rule reaches itself
  // without consuming, but back at the very same stack, which the matcher's expansion skips;
  // so that edge is not left recursion.
  bool star = false;
};

// A codepoint range, inclusive.
struct CodepointRange {
  uint32_t lo = 0, hi = 0;
};

// Bounds that keep every constraint's compiled form, and so its mask cache, finite.
inline constexpr int64_t kMaxGrammarElements = 200'000;
inline constexpr int64_t kMaxRepetition = 2'000;
// The most ways a position may begin without reading a byte (the byte classes an expansion from
// it can reach): the matcher's cost per byte grows with it, and repetitions of something that
// can be empty, such as (a?){n}, make it grow with n (docs/structured_output.md §Bounds). Past
// it the matcher would keep only the first kMaxGrammarStacks parses and silently drop the
// rest, so Check() refuses it instead.
inline constexpr int64_t kMaxGrammarFanout = 512;

class Grammar {
 public:
  // Rules by name: the first use or definition creates one. The root is rule 0 when built
  // through Root().
  int32_t Rule(const std::string& name);
  int32_t NewRule(const std::string& hint);  // a fresh helper rule
  void AddAlternative(int32_t rule, GrammarSequence sequence);
  void Define(int32_t rule) { rules_[rule].defined = true; }
  void SetRoot(int32_t rule) { root_ = rule; }

  // Elements.
  static GrammarElement Bytes(std::vector<ByteRange> ranges);
  static GrammarElement Byte(uint8_t b) { return Bytes({{b, b}}); }
  static GrammarElement Ref(int32_t rule);
  static GrammarSequence Literal(const std::string& bytes);
  // Alternatives of `rule` matching exactly the `literals`, their common prefixes shared (a
  // trie of helper rules), so that a long list begins at most 256 ways, not once per literal.
  void AddLiterals(int32_t rule, std::vector<std::string> literals);
  // One character from a set of codepoints (UTF-8 encoded), as a single element (a rule when
  // it needs more than one byte).
  GrammarElement Chars(std::vector<CodepointRange> set);
  // `body` repeated [min, max] times (max < 0: unbounded), as one element. Refuses a bound
  // above kMaxRepetition.
  absl::Status Repeat(const GrammarSequence& body, int64_t min, int64_t max, GrammarElement& out);

  // Refuses an undefined rule, a left-recursive rule (the matcher's stacks would grow without
  // consuming a byte), a position that can begin more than kMaxGrammarFanout ways, and a
  // grammar over the size bound, naming the rule.
  absl::Status Check() const;
  // Per rule: whether it derives some text. An alternative with an unproductive element can
  // never complete, and the matcher leaves it out.
  std::vector<bool> ProductiveRules() const;

  const std::vector<GrammarRule>& rules() const { return rules_; }
  int32_t root() const { return root_; }
  int64_t element_count() const;
  std::string ToString() const;  // EBNF-like, for errors and tests

 private:
  bool Room(size_t elements);  // false (and overflowed_) past kMaxGrammarElements
  // Check's part for kMaxGrammarFanout, given which rules can be empty and, per rule, the rules
  // its alternatives can lead with.
  absl::Status CheckFanout(const std::vector<bool>& nullable,
                           const std::vector<std::vector<int32_t>>& leads) const;

  std::vector<GrammarRule> rules_;
  absl::flat_hash_map<std::string, int32_t> by_name_;
  int64_t elements_ = 0;  // counted as they are added, so a huge grammar stops early
  bool overflowed_ = false;
  int32_t root_ = 0;
};

// The codepoints outside `set` in [0, 0x10FFFF], surrogates excluded.
std::vector<CodepointRange> Complement(std::vector<CodepointRange> set);
// Sorted and merged.
std::vector<CodepointRange> Normalize(std::vector<CodepointRange> set);

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_GRAMMAR_H_
