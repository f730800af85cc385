// libFuzzer target: the stop checker fed fuzz-chosen stop strings, stop ids and token texts.
// Invariants: the emitted text never contains a stop string; emitted text, then held text,
// then (at a stop string) the match, is a prefix of what was fed; no more than max_tokens.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_input.h"
#include "worker/engine/stop_checker.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace walsh;
  fuzz::FuzzInput in(data, size);
  StopConfig config;
  config.max_tokens = 1 + in.Byte() % 64;
  for (int n = in.Byte() % 4; n > 0; --n) {
    std::string s = in.String(6);
    if (!s.empty()) config.stop_strings.push_back(s);
  }
  config.eos_ids = {0};
  config.stop_ids = {1};
  config.ignore_eos = in.Byte() & 1;
  StopChecker checker(config);

  std::string fed, emitted;
  int64_t tokens = 0;
  while (!in.empty()) {
    const int32_t id = in.Byte() % 16;
    const std::string text = in.String(8);
    fed += text;
    ++tokens;
    const StopChecker::Step step = checker.Add(id, text);
    emitted += step.text;
    for (const std::string& stop : config.stop_strings) {
      if (emitted.find(stop) != std::string::npos) fuzz::Violated("a stop string was emitted");
    }
    if (step.finish != FinishReason::kNone) {
      std::string told = emitted;
      if (step.finish == FinishReason::kStop && id != 0 && id != 1) told += step.matched;
      if (fed.compare(0, told.size(), told) != 0)
        fuzz::Violated("emitted text is not what was fed");
      break;
    }
    if (fed.compare(0, emitted.size(), emitted) != 0) fuzz::Violated("emitted text was changed");
    if (tokens >= config.max_tokens) fuzz::Violated("max_tokens passed without a finish");
  }
  if (checker.generated() > config.max_tokens) fuzz::Violated("generated more than max_tokens");
  return 0;
}
