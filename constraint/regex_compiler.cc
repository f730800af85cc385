#include "constraint/regex_compiler.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "constraint/pattern_cursor.h"

namespace walsh {
namespace {

class RegexParser {
 public:
  RegexParser(Grammar& g, PatternCursor cursor, std::vector<CodepointRange> universe)
      : g_(g), in_(std::move(cursor)), universe_(std::move(universe)) {}

  absl::StatusOr<int32_t> Parse() {
    in_.Consume('^');
    ASSIGN_OR_RETURN(int32_t rule, Alternation(0));
    if (!in_.done()) {
      return in_.Error(in_.peek() == ')' ? "an unmatched ')'" : "unexpected text");
    }
    return rule;
  }

 private:
  bool AtEnd() const { return in_.done() || (in_.peek() == '$' && in_.peek(1) == 0xFFFFFFFF); }

  absl::StatusOr<int32_t> Alternation(int depth) {
    if (depth > kMaxGroupNesting) return in_.Error("groups nested too deeply");
    const int32_t rule = g_.NewRule("regex");
    while (true) {
      ASSIGN_OR_RETURN(GrammarSequence seq, Sequence(depth));
      g_.AddAlternative(rule, std::move(seq));
      if (!in_.Consume('|')) break;
    }
    return rule;
  }

  absl::StatusOr<GrammarSequence> Sequence(int depth) {
    GrammarSequence seq;
    while (!in_.done() && in_.peek() != '|' && in_.peek() != ')') {
      if (AtEnd()) {
        in_.Consume('$');
        break;
      }
      ASSIGN_OR_RETURN(GrammarElement atom, Atom(depth));
      RETURN_IF_ERROR(Quantify(atom));
      seq.push_back(std::move(atom));
    }
    return seq;
  }

  absl::StatusOr<GrammarElement> Atom(int depth) {
    const uint32_t c = in_.next();
    std::vector<CodepointRange> set;
    switch (c) {
      case '(': {
        if (in_.Consume('?')) {
          if (in_.Consume(':')) {
          } else if (in_.peek() == '<' && in_.peek(1) != '=' && in_.peek(1) != '!') {
            in_.next();
            while (!in_.done() && in_.peek() != '>') in_.next();
            if (!in_.Consume('>')) return in_.Error("an unterminated group name");
          } else {
            return in_.Error("lookaround assertions are not supported");
          }
        }
        ASSIGN_OR_RETURN(int32_t rule, Alternation(depth + 1));
        if (!in_.Consume(')')) return in_.Error("a missing ')'");
        return Grammar::Ref(rule);
      }
      case '[':
        RETURN_IF_ERROR(in_.Class(set));
        break;
      case '.':
        set = Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}});
        break;
      case '\\':
        RETURN_IF_ERROR(in_.Escape(false, set));
        break;
      case '^':
        return in_.Error("'^' is supported only at the start");
      case '$':
        return in_.Error("'$' is supported only at the end");
      case '*':
      case '+':
      case '?':
        return in_.Error("a quantifier with nothing to repeat");
      case '{': {
        int64_t n;
        if (in_.Number(n)) return in_.Error("a quantifier with nothing to repeat");
        set.push_back({c, c});
        break;
      }
      default:
        set.push_back({c, c});
    }
    return g_.Chars(Intersect(set, universe_));
  }

  absl::Status Quantify(GrammarElement& atom) {
    int64_t min = 1, max = 1;
    ASSIGN_OR_RETURN(bool quantified, in_.Quantifier(/*spaced=*/false, min, max));
    if (!quantified) return absl::OkStatus();
    in_.Consume('?');  // lazy: the same language
    if (in_.peek() == '*' || in_.peek() == '+' || in_.peek() == '?' ||
        (in_.peek() == '{' && in_.peek(1) >= '0' && in_.peek(1) <= '9')) {
      return in_.Error("a quantifier with nothing to repeat");
    }
    absl::Status s = g_.Repeat({atom}, min, max, atom);
    if (!s.ok()) return in_.Error(s.message());
    return absl::OkStatus();
  }

  Grammar& g_;
  PatternCursor in_;
  std::vector<CodepointRange> universe_;
};

}  // namespace

absl::StatusOr<int32_t> AddRegexRule(Grammar& grammar, absl::string_view pattern,
                                     const std::vector<CodepointRange>& universe) {
  ASSIGN_OR_RETURN(PatternCursor cursor, PatternCursor::FromUtf8(pattern, "regex"));
  return RegexParser(grammar, std::move(cursor), universe).Parse();
}

absl::StatusOr<Grammar> RegexGrammar(absl::string_view pattern) {
  Grammar g;
  const int32_t root = g.Rule("root");
  g.Define(root);
  ASSIGN_OR_RETURN(int32_t body, AddRegexRule(g, pattern, {{0, 0x10FFFF}}));
  g.AddAlternative(root, {Grammar::Ref(body)});
  g.SetRoot(root);
  absl::Status s = g.Check();
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("regex: ", s.message()));
  return g;
}

}  // namespace walsh
