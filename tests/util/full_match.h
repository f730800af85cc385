// Whether a compiled grammar's language holds a text exactly, byte by byte from its start: the
// tests' reference for what a constraint accepts.
#ifndef WALSH_TESTS_UTIL_FULL_MATCH_H_
#define WALSH_TESTS_UTIL_FULL_MATCH_H_

#include <string>
#include <vector>

#include "constraint/compiled_grammar.h"

namespace walsh::testing {

inline bool FullMatch(const CompiledGrammar& g, const std::string& text) {
  std::vector<GrammarStack> cur = g.Start(), next;
  for (char c : text) {
    g.Advance(cur, static_cast<uint8_t>(c), next);
    cur.swap(next);
  }
  for (const GrammarStack& s : cur) {
    if (s.empty()) return true;
  }
  return false;
}

}  // namespace walsh::testing

#endif  // WALSH_TESTS_UTIL_FULL_MATCH_H_
