// How walsh-run writes each generated token to stdout: its text, its id, or a JSON line with its
// log-probabilities, and a closing line.
#ifndef WALSH_TOOLS_RUN_TOKEN_PRINTER_H_
#define WALSH_TOOLS_RUN_TOKEN_PRINTER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "worker/engine/generation.h"

namespace walsh {

class TokenPrinter {
 public:
  // `output`: text, ids or json (RunOptions::Validate checked it).
  TokenPrinter(std::string output, bool with_logprobs)
      : output_(std::move(output)), with_logprobs_(with_logprobs) {}

  void Print(const GeneratedToken& token);
  // json: a last line with the finish reason, the stop matched and the token counts; otherwise a
  // newline.
  void Finish(FinishReason finish, const std::string& matched_stop, size_t prompt_tokens,
              int64_t completion_tokens);

 private:
  std::string output_;
  bool with_logprobs_;
};

}  // namespace walsh

#endif  // WALSH_TOOLS_RUN_TOKEN_PRINTER_H_
