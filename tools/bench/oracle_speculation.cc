#include "tools/bench/oracle_speculation.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/ops.h"

namespace walsh {
namespace {

// New sequences holding the prompts; `next` gets each one's greedy first token.
absl::StatusOr<std::vector<SequenceInput>> Prefill(SequenceRunner& e,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   std::vector<int32_t>* next) {
  std::vector<SequenceInput> batch;
  for (const auto& p : prompts) {
    ASSIGN_OR_RETURN(const SequenceId id, e.AddSequence());
    batch.push_back({id, p});
  }
  ASSIGN_OR_RETURN(const ForwardResult out, e.Forward(batch));
  next->clear();
  for (size_t i = 0; i < batch.size(); ++i)
    next->push_back(static_cast<int32_t>(Argmax(out.RowLogits(i), out.vocab)));
  return batch;
}

}  // namespace

absl::StatusOr<OracleSpeculation> RunOracleSpeculation(
    SequenceRunner& e, const std::vector<std::vector<int32_t>>& prompts, int64_t k, int64_t gen) {
  const size_t n = prompts.size();
  const int64_t steps = std::max<int64_t>(1, gen / (k + 1));
  // The oracle: each sequence's greedy continuation, one token per step.
  std::vector<std::vector<int32_t>> truth(n);
  std::vector<int32_t> next;
  ASSIGN_OR_RETURN(std::vector<SequenceInput> batch, Prefill(e, prompts, &next));
  for (int64_t t = 0; t <= steps * (k + 1); ++t) {
    for (size_t i = 0; i < n; ++i) {
      truth[i].push_back(next[i]);
      batch[i].tokens = {next[i]};
    }
    ASSIGN_OR_RETURN(const ForwardResult out, e.Forward(batch));
    for (size_t i = 0; i < n; ++i)
      next[i] = static_cast<int32_t>(Argmax(out.RowLogits(i), out.vocab));
  }
  for (const SequenceInput& in : batch) RETURN_IF_ERROR(e.RemoveSequence(in.id));

  // Speculative: every step feeds the token sampled last and the k that follow it.
  ASSIGN_OR_RETURN(batch, Prefill(e, prompts, &next));
  OracleSpeculation run;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    const size_t at = static_cast<size_t>(s * (k + 1));
    for (size_t i = 0; i < n; ++i) {
      batch[i].tokens.assign(truth[i].begin() + at, truth[i].begin() + at + k + 1);
      batch[i].all_logits = true;
      batch[i].keep_states = true;
    }
    ASSIGN_OR_RETURN(const ForwardResult out, e.Forward(batch));
    for (size_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= k; ++j) {
        const int64_t sampled = Argmax(out.RowLogits(i * (k + 1) + j), out.vocab);
        if (sampled != truth[i][at + j + 1]) {
          return absl::InternalError(absl::StrCat("sequence ", i, " sampled ", sampled, " at ",
                                                  at + j + 1, ", plain decoding ",
                                                  truth[i][at + j + 1]));
        }
      }
      ASSIGN_OR_RETURN(const int64_t length, e.SequenceLength(batch[i].id));
      RETURN_IF_ERROR(e.Rollback(batch[i].id, length));  // all kept
    }
    ++run.steps;
    run.tokens += static_cast<int64_t>(n) * (k + 1);
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const SequenceInput& in : batch) RETURN_IF_ERROR(e.RemoveSequence(in.id));
  return run;
}

}  // namespace walsh
