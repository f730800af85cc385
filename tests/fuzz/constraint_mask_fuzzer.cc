// libFuzzer target: token masks. The first byte picks a regex, a grammar or a JSON schema, the
// rest is its text; whatever compiles (warmed ahead when the first byte's top bit is set) is
// walked for a few tokens over a small vocabulary, every mask checked against brute force (a
// token is allowed exactly when its bytes keep the automaton alive) and every allowed token
// accepted.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/constraint_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace walsh;
  if (size < 1) return 0;
  constexpr ConstraintSpec::Kind kKinds[] = {ConstraintSpec::Kind::kRegex,
                                             ConstraintSpec::Kind::kGrammar,
                                             ConstraintSpec::Kind::kJsonSchema};
  const ConstraintSpec spec{kKinds[data[0] % 3],
                            std::string(reinterpret_cast<const char*>(data + 1), size - 1)};
  if (auto compiled = fuzz::Compile(spec)) {
    // Half the inputs walk a grammar warmed ahead (as the worker's mask threads do).
    if (data[0] & 0x80) {
      while (compiled->WarmNext()) {
      }
    }
    fuzz::WalkAgainstBruteForce(compiled, data, size);
  }
  return 0;
}
