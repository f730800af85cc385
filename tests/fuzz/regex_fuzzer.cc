// libFuzzer target: the regex compiler on untrusted text. It must refuse (saying why) or
// compile, never crash; what it compiles must pass the grammar's own check and start a matcher.
// Masks are fuzzed by constraint_mask_fuzzer.cc.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/constraint_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace walsh;
  (void)fuzz::Compile(
      {ConstraintSpec::Kind::kRegex, std::string(reinterpret_cast<const char*>(data), size)});
  return 0;
}
