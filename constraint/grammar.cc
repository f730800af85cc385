#include "constraint/grammar.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "constraint/utf8_ranges.h"

namespace walsh {

int32_t Grammar::Rule(const std::string& name) {
  auto [it, fresh] = by_name_.try_emplace(name, static_cast<int32_t>(rules_.size()));
  if (fresh) {
    (void)Room(1);
    rules_.push_back({name, {}, false, false});
  }
  return it->second;
}

int32_t Grammar::NewRule(const std::string& hint) {
  (void)Room(1);
  rules_.push_back({absl::StrCat(hint, "#", rules_.size()), {}, true, false});
  return static_cast<int32_t>(rules_.size() - 1);
}

bool Grammar::Room(size_t elements) {
  if (overflowed_ || elements_ + static_cast<int64_t>(elements) > kMaxGrammarElements) {
    overflowed_ = true;
    return false;
  }
  elements_ += static_cast<int64_t>(elements);
  return true;
}

void Grammar::AddAlternative(int32_t rule, GrammarSequence sequence) {
  if (!Room(sequence.size() + 1)) return;
  rules_[rule].alternatives.push_back(std::move(sequence));
}

GrammarElement Grammar::Bytes(std::vector<ByteRange> ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.lo < b.lo; });
  std::vector<ByteRange> merged;
  for (const ByteRange& r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  GrammarElement e;
  e.kind = GrammarElement::Kind::kBytes;
  e.ranges = std::move(merged);
  return e;
}

GrammarElement Grammar::Ref(int32_t rule) {
  GrammarElement e;
  e.kind = GrammarElement::Kind::kRule;
  e.rule = rule;
  return e;
}

GrammarSequence Grammar::Literal(const std::string& bytes) {
  GrammarSequence s;
  for (char c : bytes) s.push_back(Byte(static_cast<uint8_t>(c)));
  return s;
}

void Grammar::AddLiterals(int32_t rule, std::vector<std::string> literals) {
  std::sort(literals.begin(), literals.end());
  literals.erase(std::unique(literals.begin(), literals.end()), literals.end());
  // Each group shares its first `depth` bytes, already matched on the way to `rule`.
  struct Group {
    int32_t rule;
    size_t begin, end, depth;
  };
  std::vector<Group> work{{rule, 0, literals.size(), 0}};
  while (!work.empty()) {
    const Group g = work.back();
    work.pop_back();
    for (size_t i = g.begin; i < g.end;) {
      if (literals[i].size() == g.depth) {  // ends here
        AddAlternative(g.rule, {});
        ++i;
        continue;
      }
      const char byte = literals[i][g.depth];  // the group: the literals that go on with it
      size_t j = i + 1;
      while (j < g.end && literals[j].size() > g.depth && literals[j][g.depth] == byte) ++j;
      if (j == i + 1) {
        AddAlternative(g.rule, Literal(literals[i].substr(g.depth)));
      } else {
        // The group's common prefix (its first and last share it: they are sorted) in one
        // sequence, then a rule for what follows.
        size_t shared = g.depth + 1;
        const std::string& first = literals[i];
        const std::string& last = literals[j - 1];
        while (shared < first.size() && shared < last.size() && first[shared] == last[shared]) {
          ++shared;
        }
        const int32_t next = NewRule("literals");
        GrammarSequence prefix = Literal(first.substr(g.depth, shared - g.depth));
        prefix.push_back(Ref(next));
        AddAlternative(g.rule, std::move(prefix));
        work.push_back({next, i, j, shared});
      }
      i = j;
    }
  }
}

std::vector<CodepointRange> Normalize(std::vector<CodepointRange> set) {
  std::sort(set.begin(), set.end(),
            [](const CodepointRange& a, const CodepointRange& b) { return a.lo < b.lo; });
  std::vector<CodepointRange> out;
  for (CodepointRange r : set) {
    r.hi = std::min<uint32_t>(r.hi, 0x10FFFF);
    if (r.lo > r.hi) continue;
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodepointRange> Complement(std::vector<CodepointRange> set) {
  set = Normalize(std::move(set));
  std::vector<CodepointRange> out;
  uint32_t next = 0;
  for (const CodepointRange& r : set) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

GrammarElement Grammar::Chars(std::vector<CodepointRange> set) {
  set = Normalize(std::move(set));
  std::vector<ByteRange> ascii;
  std::vector<std::vector<ByteRange>> longer;
  for (const CodepointRange& r : set) {
    for (auto& seq : Utf8Sequences(r.lo, r.hi)) {
      if (seq.size() == 1) {
        ascii.push_back(seq[0]);
      } else {
        longer.push_back(std::move(seq));
      }
    }
  }
  if (longer.empty() && !ascii.empty()) return Bytes(std::move(ascii));
  const int32_t rule = NewRule("char");
  if (!ascii.empty()) AddAlternative(rule, {Bytes(std::move(ascii))});
  // Sequences with the same leading bytes share a prefix: one alternative per lead range.
  for (const auto& seq : longer) {
    GrammarSequence alt;
    for (const ByteRange& b : seq) alt.push_back(Bytes({b}));
    AddAlternative(rule, std::move(alt));
  }
  return Ref(rule);
}

absl::Status Grammar::Repeat(const GrammarSequence& body, int64_t min, int64_t max,
                             GrammarElement& out) {
  if (!Room(0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the grammar compiles to more than %d elements", kMaxGrammarElements));
  }
  if (min < 0 || min > kMaxRepetition || max > kMaxRepetition) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a repetition bound above %d", kMaxRepetition));
  }
  if (max >= 0 && max < min) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a repetition whose maximum %d is below its minimum %d", max, min));
  }
  GrammarElement item;
  if (body.size() == 1) {
    item = body[0];
  } else {
    const int32_t b = NewRule("group");
    AddAlternative(b, body);
    item = Ref(b);
  }
  const int32_t rule = NewRule("repeat");
  GrammarSequence head(static_cast<size_t>(min), item);
  if (max < 0) {
    const int32_t star = NewRule("star");
    rules_[star].star = true;
    AddAlternative(star, {item, Ref(star)});
    AddAlternative(star, {});
    head.push_back(Ref(star));
  } else if (max > min) {
    // opt_k ::= item opt_{k+1} | "" for the max - min optional items, built from the last.
    int32_t next = -1;
    for (int64_t k = max - min; k > 0; --k) {
      const int32_t opt = NewRule("opt");
      GrammarSequence more{item};
      if (next >= 0) more.push_back(Ref(next));
      AddAlternative(opt, std::move(more));
      AddAlternative(opt, {});
      next = opt;
    }
    head.push_back(Ref(next));
  }
  AddAlternative(rule, std::move(head));
  out = Ref(rule);
  return absl::OkStatus();
}

int64_t Grammar::element_count() const {
  int64_t n = 0;
  for (const GrammarRule& r : rules_) {
    for (const GrammarSequence& a : r.alternatives) n += static_cast<int64_t>(a.size()) + 1;
  }
  return n;
}

absl::Status Grammar::Check() const {
  if (rules_.empty()) return absl::InvalidArgumentError("the grammar has no rules");
  for (const GrammarRule& r : rules_) {
    if (!r.defined)
      return absl::InvalidArgumentError(
          absl::StrCat("rule '", r.name, "' is used but not defined"));
  }
  if (overflowed_ || element_count() > kMaxGrammarElements) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the grammar compiles to more than %d elements", kMaxGrammarElements));
  }
  const size_t n = rules_.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (nullable[i]) continue;
      for (const GrammarSequence& alt : rules_[i].alternatives) {
        bool all = true;
        for (const GrammarElement& e : alt) {
          if (e.kind == GrammarElement::Kind::kBytes || !nullable[e.rule]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[i] = changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: a rule that reaches itself through leading nullable elements.
  std::vector<std::vector<int32_t>> leads(n);
  for (size_t i = 0; i < n; ++i) {
    for (const GrammarSequence& alt : rules_[i].alternatives) {
      for (const GrammarElement& e : alt) {
        if (e.kind == GrammarElement::Kind::kBytes) break;
        if (rules_[i].star && e.rule == static_cast<int32_t>(i)) break;
        leads[i].push_back(e.rule);
        if (!nullable[e.rule]) break;
      }
    }
  }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> path;
  for (size_t start = 0; start < n; ++start) {
    if (color[start] != 0) continue;
    path.push_back({static_cast<int32_t>(start), 0});
    color[start] = 1;
    while (!path.empty()) {
      auto& [rule, next] = path.back();
      if (next == leads[rule].size()) {
        color[rule] = 2;
        path.pop_back();
        continue;
      }
      const int32_t to = leads[rule][next++];
      if (color[to] == 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("rule '", rules_[to].name, "' is left-recursive"));
      }
      if (color[to] == 0) {
        color[to] = 1;
        path.push_back({to, 0});
      }
    }
  }
  RETURN_IF_ERROR(CheckFanout(nullable, leads));
  const std::vector<bool> productive = ProductiveRules();
  if (!productive[root_]) return absl::InvalidArgumentError("the constraint matches no text");
  return absl::OkStatus();
}

absl::Status Grammar::CheckFanout(const std::vector<bool>& nullable,
                                  const std::vector<std::vector<int32_t>>& leads) const {
  // fanout[r]: the byte classes entering r reaches before reading a byte, counted per path, in
  // an order where every rule comes after those its alternatives lead with (the leads are
  // acyclic: Check refused left recursion). Saturates past the bound.
  const size_t n = rules_.size();
  constexpr int64_t kOver = kMaxGrammarFanout + 1;
  std::vector<int64_t> fanout(n, -1);
  std::vector<int32_t> order;
  std::vector<std::pair<int32_t, size_t>> path;
  for (size_t start = 0; start < n; ++start) {
    if (fanout[start] != -1) continue;
    fanout[start] = -2;  // on the path
    path.push_back({static_cast<int32_t>(start), 0});
    while (!path.empty()) {
      auto& [rule, next] = path.back();
      if (next == leads[rule].size()) {
        order.push_back(rule);
        fanout[rule] = 0;
        path.pop_back();
        continue;
      }
      const int32_t to = leads[rule][next++];
      if (fanout[to] == -1) {
        fanout[to] = -2;
        path.push_back({to, 0});
      }
    }
  }
  // From element i of `alt` on: its fan-out, and the next one's while it can be empty.
  auto from = [&](const GrammarSequence& alt, size_t i, int32_t self) {
    int64_t total = 0;
    for (; i < alt.size() && total < kOver; ++i) {
      const GrammarElement& e = alt[i];
      if (e.kind == GrammarElement::Kind::kBytes) return total + 1;
      if (e.rule != self || !rules_[self].star) total += fanout[e.rule];
      if (!nullable[e.rule]) break;
    }
    return std::min(total, kOver);
  };
  for (int32_t r : order) {
    int64_t total = 0;
    for (const GrammarSequence& alt : rules_[r].alternatives) {
      total = std::min(total + from(alt, 0, r), kOver);
    }
    fanout[r] = total;
  }
  // Every position's, right to left: from(alt, i) is element i's own plus, when it can be
  // empty, from(alt, i + 1); one pass, however long a run of empty-able elements is.
  for (size_t r = 0; r < n; ++r) {
    for (const GrammarSequence& alt : rules_[r].alternatives) {
      int64_t after = 0;
      for (size_t i = alt.size(); i-- > 0;) {
        const GrammarElement& e = alt[i];
        if (e.kind == GrammarElement::Kind::kBytes) {
          after = 1;
          continue;
        }
        const bool self_star = e.rule == static_cast<int32_t>(r) && rules_[r].star;
        after = std::min((self_star ? 0 : fanout[e.rule]) + (nullable[e.rule] ? after : 0), kOver);
        if (after <= kMaxGrammarFanout) continue;
        return absl::InvalidArgumentError(absl::StrFormat(
            "rule '%s' can begin more than %d ways before reading a byte, more parses than the "
            "matcher follows at once: a repetition of something that can be empty, such as "
            "(a?){n}, multiplies them (make the repeated part non-empty), as do that many "
            "alternatives (anyOf, alternation) that start alike",
            rules_[r].name, kMaxGrammarFanout));
      }
    }
  }
  return absl::OkStatus();
}

std::vector<bool> Grammar::ProductiveRules() const {
  const size_t n = rules_.size();
  std::vector<bool> productive(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (productive[i]) continue;
      for (const GrammarSequence& alt : rules_[i].alternatives) {
        bool all = true;
        for (const GrammarElement& e : alt) {
          all = all &&
                (e.kind == GrammarElement::Kind::kBytes ? !e.ranges.empty() : productive[e.rule]);
        }
        if (all) {
          productive[i] = changed = true;
          break;
        }
      }
    }
  }
  return productive;
}

std::string Grammar::ToString() const {
  std::string out;
  for (const GrammarRule& r : rules_) {
    absl::StrAppend(&out, r.name, " ::=");
    for (size_t a = 0; a < r.alternatives.size(); ++a) {
      if (a > 0) absl::StrAppend(&out, " |");
      for (const GrammarElement& e : r.alternatives[a]) {
        if (e.kind == GrammarElement::Kind::kRule) {
          absl::StrAppend(&out, " ", rules_[e.rule].name);
          continue;
        }
        absl::StrAppend(&out, " [");
        for (const ByteRange& b : e.ranges) {
          absl::StrAppendFormat(&out, "%02x", b.lo);
          if (b.hi != b.lo) absl::StrAppendFormat(&out, "-%02x", b.hi);
        }
        absl::StrAppend(&out, "]");
      }
      if (r.alternatives[a].empty()) absl::StrAppend(&out, " \"\"");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace walsh
