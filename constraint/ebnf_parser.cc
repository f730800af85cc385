#include "constraint/ebnf_parser.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "constraint/json_schema_compiler.h"
#include "constraint/pattern_cursor.h"

namespace walsh {
namespace {

bool IsNameChar(uint32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class EbnfParser {
 public:
  explicit EbnfParser(PatternCursor in) : in_(std::move(in)) {}

  absl::StatusOr<Grammar> Parse() {
    const int32_t root = g_.Rule("root");
    g_.SetRoot(root);
    SkipSpace();
    while (!in_.done()) {
      std::string name = Name();
      if (name.empty()) return in_.Error("expected a rule name");
      SkipSpace();
      if (!(in_.Consume(':') && in_.Consume(':') && in_.Consume('='))) {
        return in_.Error(absl::StrCat("expected '::=' after rule name '", name, "'"));
      }
      const int32_t rule = g_.Rule(name);
      if (g_.rules()[rule].defined) {
        return in_.Error(absl::StrCat("rule '", name, "' is defined twice"));
      }
      g_.Define(rule);
      RETURN_IF_ERROR(Alternatives(rule, 0));
      SkipSpace();
    }
    if (!g_.rules()[root].defined) {
      return absl::InvalidArgumentError("grammar: there is no rule 'root' to start from");
    }
    absl::Status s = g_.Check();
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("grammar: ", s.message()));
    return std::move(g_);
  }

 private:
  void SkipSpace() {
    while (!in_.done()) {
      const uint32_t c = in_.peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        in_.next();
      } else if (c == '#') {
        while (!in_.done() && in_.peek() != '\n') in_.next();
      } else {
        break;
      }
    }
  }

  std::string Name() {
    std::string name;
    while (!in_.done() && IsNameChar(in_.peek())) name.push_back(static_cast<char>(in_.next()));
    return name;
  }

  // At a rule name followed by '::=': the next rule starts.
  bool AtRuleStart() {
    size_t k = 0;
    while (IsNameChar(in_.peek(k))) ++k;
    if (k == 0) return false;
    while (in_.peek(k) == ' ' || in_.peek(k) == '\t') ++k;
    return in_.peek(k) == ':' && in_.peek(k + 1) == ':' && in_.peek(k + 2) == '=';
  }

  absl::Status Alternatives(int32_t rule, int depth) {
    if (depth > kMaxGroupNesting) return in_.Error("groups nested too deeply");
    while (true) {
      GrammarSequence seq;
      RETURN_IF_ERROR(Sequence(seq, depth));
      g_.AddAlternative(rule, std::move(seq));
      SkipSpace();
      if (!in_.Consume('|')) return absl::OkStatus();
    }
  }

  absl::Status Sequence(GrammarSequence& seq, int depth) {
    while (true) {
      SkipSpace();
      if (in_.done() || in_.peek() == '|' || in_.peek() == ')' || AtRuleStart()) {
        return absl::OkStatus();
      }
      GrammarSequence term;
      RETURN_IF_ERROR(Term(term, depth));
      RETURN_IF_ERROR(Postfix(term));
      seq.insert(seq.end(), term.begin(), term.end());
    }
  }

  absl::Status Term(GrammarSequence& out, int depth) {
    const uint32_t c = in_.next();
    std::vector<CodepointRange> set;
    if (c == '"') {
      while (true) {
        if (in_.done()) return in_.Error("an unterminated string");
        uint32_t d = in_.next();
        if (d == '"') return absl::OkStatus();
        set.clear();
        if (d == '\\') {
          RETURN_IF_ERROR(in_.Escape(true, set));
          if (set.size() != 1 || set[0].lo != set[0].hi) {
            return in_.Error("a class escape inside a string");
          }
        } else {
          set.push_back({d, d});
        }
        out.push_back(g_.Chars(set));
      }
    }
    if (c == '[') {
      RETURN_IF_ERROR(in_.Class(set));
      out.push_back(g_.Chars(set));
      return absl::OkStatus();
    }
    if (c == '.') {
      out.push_back(g_.Chars({{0, 0x10FFFF}}));
      return absl::OkStatus();
    }
    if (c == '(') {
      const int32_t group = g_.NewRule("group");
      RETURN_IF_ERROR(Alternatives(group, depth + 1));
      if (!in_.Consume(')')) return in_.Error("a missing ')'");
      out.push_back(Grammar::Ref(group));
      return absl::OkStatus();
    }
    if (c == '%') {
      // %json { schema }: the JSON Schema's language, as a term.
      std::string word;
      while (!in_.done() && IsNameChar(in_.peek())) word.push_back(static_cast<char>(in_.next()));
      if (word != "json") return in_.Error(absl::StrCat("unknown directive %", word));
      SkipSpace();
      const size_t at = in_.pos();
      ASSIGN_OR_RETURN(std::string schema, JsonObjectText());
      absl::StatusOr<GrammarElement> e = AddJsonSchema(g_, schema);
      if (!e.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("grammar: %json at offset ", at, ": ", e.status().message()));
      }
      out.push_back(*e);
      return absl::OkStatus();
    }
    if (IsNameChar(c)) {
      std::string name(1, static_cast<char>(c));
      name += Name();
      out.push_back(Grammar::Ref(g_.Rule(name)));
      return absl::OkStatus();
    }
    return in_.Error("expected a string, a class, '.', '(' or a rule name");
  }

  absl::Status Postfix(GrammarSequence& term) {
    while (true) {
      int64_t min, max;
      ASSIGN_OR_RETURN(bool quantified, in_.Quantifier(/*spaced=*/true, min, max));
      if (!quantified) return absl::OkStatus();
      GrammarElement e;
      absl::Status s = g_.Repeat(term, min, max, e);
      if (!s.ok()) return in_.Error(s.message());
      term = {e};
    }
  }

  // A balanced {...} (strings and escapes respected), as UTF-8.
  absl::StatusOr<std::string> JsonObjectText() {
    if (in_.peek() != '{') return in_.Error("%json needs a JSON object");
    std::string out;
    int depth = 0;
    bool in_string = false;
    while (!in_.done()) {
      const uint32_t c = in_.next();
      AppendUtf8(c, out);
      if (in_string) {
        if (c == '\\' && !in_.done()) {
          AppendUtf8(in_.next(), out);
        } else if (c == '"') {
          in_string = false;
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) return out;
      }
    }
    return in_.Error("an unterminated %json object");
  }

  static void AppendUtf8(uint32_t c, std::string& out) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }

  PatternCursor in_;
  Grammar g_;
};

}  // namespace

absl::StatusOr<Grammar> ParseEbnf(absl::string_view text) {
  ASSIGN_OR_RETURN(PatternCursor cursor, PatternCursor::FromUtf8(text, "grammar"));
  return EbnfParser(std::move(cursor)).Parse();
}

}  // namespace walsh
