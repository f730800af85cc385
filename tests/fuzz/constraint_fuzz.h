// Shared by the constraint fuzz targets: compile a constraint, then walk its matcher over a
// small vocabulary, checking every mask against brute force (a token is allowed exactly when
// its bytes keep the automaton alive).
#ifndef WALSH_TESTS_FUZZ_CONSTRAINT_FUZZ_H_
#define WALSH_TESTS_FUZZ_CONSTRAINT_FUZZ_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "constraint/compiled_grammar.h"
#include "constraint/constraint_cache.h"
#include "constraint/grammar_matcher.h"
#include "constraint/mask_budget.h"
#include "tests/fuzz/fuzz_input.h"

namespace walsh::fuzz {

// Every byte, and short tokens of JSON's and regexes' usual characters.
inline std::shared_ptr<const TokenTrie> FuzzVocabulary() {
  static const auto* trie = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"{\"",   "\":", "\",", "\"}",      "true",     "false",       "null",
                          "[]",    "{}",  "ab",  "a\"",      "\\n",      "\\u00",       "12",
                          "-1",    ".5",  "e+",  "\xc3\xa9", "\xe2\x82", "\xac",        " \"",
                          "\":\"", "}]",  "],",  "xyz",      "0",        "<tool_call>", ""}) {
      tokens.push_back(t);
    }
    return new std::shared_ptr<const TokenTrie>(std::make_shared<const TokenTrie>(tokens));
  }();
  return *trie;
}

// Compiles `spec`: a refusal must say why; what compiles must pass its own check and start.
inline std::shared_ptr<const CompiledGrammar> Compile(const ConstraintSpec& spec) {
  absl::StatusOr<Grammar> grammar = ConstraintGrammar(spec);
  if (!grammar.ok()) {
    if (grammar.status().message().empty()) Violated("a refusal without a message");
    return nullptr;
  }
  if (!grammar->Check().ok()) Violated("a compiled grammar fails its own check");
  auto compiled = std::make_shared<const CompiledGrammar>(*grammar, FuzzVocabulary());
  (void)compiled->Start();
  return compiled;
}

// Walks up to six tokens chosen by the input's last bytes, every mask against brute force and
// against itself computed again. The cost oracle: what compiled stays within the default work
// budget per mask and per token (mask_budget.h), or compilation should have refused it.
inline void WalkAgainstBruteForce(std::shared_ptr<const CompiledGrammar> compiled,
                                  const uint8_t* data, size_t size) {
  GrammarMatcher m(compiled);
  // The walk's choices come from the input's bytes, read from the back.
  const int64_t vocab = compiled->trie().vocab_size();
  for (size_t step = 0; step < 6 && !m.MustEnd(); ++step) {
    std::vector<uint64_t> mask, again;
    const MaskLimits work_only{.work = MaskLimits::kDefaultWork,
                               .time = std::chrono::milliseconds(0)};
    MaskBudget budget(work_only);
    if (!m.FillMask(mask, budget).ok()) Violated("a compiled grammar's mask ran past the budget");
    m.FillMask(again);  // from the grammar's per-stack memo this time
    if (again != mask) Violated("a memoized mask differs from the walked one");
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab; ++id) {
      const bool brute = m.Accepts(id);
      if (brute != (((mask[id >> 6] >> (id & 63)) & 1) != 0))
        Violated("mask differs from brute force");
      if (brute) allowed.push_back(id);
    }
    if (allowed.empty()) return;
    const uint8_t pick = step < size ? data[size - 1 - step] : 0;
    MaskBudget advance(work_only);
    if (!m.AcceptToken(allowed[pick % allowed.size()], advance)) {
      Violated(advance.spent() ? "advancing past a token ran past the budget"
                               : "an allowed token was refused");
    }
  }
}

}  // namespace walsh::fuzz

#endif  // WALSH_TESTS_FUZZ_CONSTRAINT_FUZZ_H_
