// Decides when a generation ends and which text may be streamed: EOS and stop token ids end
// it without emitting their text; stop strings are matched across token boundaries and never
// emitted (text that could still become a stop string is held back); max tokens ends it with
// reason "length".
#ifndef WALSH_WORKER_ENGINE_STOP_CHECKER_H_
#define WALSH_WORKER_ENGINE_STOP_CHECKER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace walsh {

enum class FinishReason { kNone, kStop, kLength, kCancelled };
const char* FinishReasonName(FinishReason r);

struct StopConfig {
  int64_t max_tokens = 256;
  std::vector<std::string> stop_strings;
  std::vector<int32_t> stop_ids;
  std::vector<int32_t> eos_ids;
  bool ignore_eos = false;
};

class StopChecker {
 public:
  explicit StopChecker(StopConfig config);

  struct Step {
    std::string text;  // safe to send now
    FinishReason finish = FinishReason::kNone;
    std::string matched;  // the stop string, or the stop token's id as text
  };
  // Feeds the next generated token and the text the detokenizer produced for it.
  Step Add(int32_t id, const std::string& text);
  // At a finish the caller did not get from Add (e.g. cancellation): the held text.
  std::string Flush();
  int64_t generated() const { return generated_; }

 private:
  StopConfig config_;
  std::string held_;
  int64_t generated_ = 0;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_STOP_CHECKER_H_
