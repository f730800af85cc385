// walsh-run's work: load a model, build the prompt, prefill it, decode and print each token.
#ifndef WALSH_TOOLS_RUN_RUN_GENERATION_H_
#define WALSH_TOOLS_RUN_RUN_GENERATION_H_

#include "absl/status/status.h"
#include "tools/run/run_options.h"

namespace walsh {

// Runs `options` (validated). A failure's code says whose it is: FAILED_PRECONDITION the model's
// (refused at load, no usable tokenizer, no engine for it), INVALID_ARGUMENT the invocation's (a
// prompt that cannot be built, an output file that cannot be created), anything else the run's.
absl::Status RunGeneration(const RunOptions& options);

}  // namespace walsh

#endif  // WALSH_TOOLS_RUN_RUN_GENERATION_H_
