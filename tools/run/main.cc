// walsh-run: generate from a model on the CPU, streaming text to stdout.
//   walsh-run --model FILE (--prompt TEXT | --messages JSON | --tokens ID,ID,...) [options]
// Exits 0 when done, 1 when the model is refused, 2 on a usage error, 3 when the run fails.
#include <cstdio>
#include <string>

#include "common/cli_flags.h"
#include "tools/run/run_generation.h"
#include "tools/run/run_options.h"

namespace walsh {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "walsh-run: %s\n", std::string(status.message()).c_str());
  switch (status.code()) {
    case absl::StatusCode::kFailedPrecondition:
      return 1;
    case absl::StatusCode::kInvalidArgument:
      return 2;
    default:
      return 3;
  }
}

int Run(int argc, char** argv) {
  RunOptions options;
  FlagSet flags(
      "walsh-run --model FILE (--prompt TEXT | --messages JSON | --tokens ID,ID,...) "
      "[--max-tokens N] [--temperature T] [--seed S] [--ignore-eos] [--threads N] "
      "[--output text|ids|json] [--logits-out FILE]");
  options.Register(flags);
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    return Fail(absl::InvalidArgumentError(std::string(s.message()) + "\n" + flags.Help()));
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (absl::Status s = options.Validate(); !s.ok()) return Fail(s);
  if (absl::Status s = RunGeneration(options); !s.ok()) return Fail(s);
  return 0;
}

}  // namespace
}  // namespace walsh

int main(int argc, char** argv) { return walsh::Run(argc, argv); }
