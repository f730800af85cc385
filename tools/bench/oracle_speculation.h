// The ceiling of speculative decoding on an engine (walsh-bench decode --speculate K): sequences
// decode greedily, and every step verifies K drafts that are always right, because they are the
// greedy continuation computed beforehand (an oracle drafter that costs nothing). Its tokens/s
// against plain decoding's is the most any drafter can gain on this engine and machine.
#ifndef WALSH_TOOLS_BENCH_ORACLE_SPECULATION_H_
#define WALSH_TOOLS_BENCH_ORACLE_SPECULATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/sequence_runner.h"

namespace walsh {

struct OracleSpeculation {
  double seconds = 0;  // the timed verification steps
  int64_t steps = 0, tokens = 0;
};

// `prompts.size()` sequences, each decoding about `gen` tokens after its prompt, K + 1 per step.
// A draft the engine does not accept (its greedy sample differs from plain decoding's) is an
// error: the engine would not be schedule-invariant.
absl::StatusOr<OracleSpeculation> RunOracleSpeculation(
    SequenceRunner& engine, const std::vector<std::vector<int32_t>>& prompts, int64_t k,
    int64_t gen);

}  // namespace walsh

#endif  // WALSH_TOOLS_BENCH_ORACLE_SPECULATION_H_
