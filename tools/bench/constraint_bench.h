// walsh-bench constraint: what structured output costs on one core (docs/structured_output.md).
// For a nested JSON schema, any JSON object and a regex, over the model's own vocabulary: the
// compile time, the time per token of a mask (cold, while the per-position cache fills; warm,
// once it has) walking a document the constraint accepts; and, with --batch, decode steps of
// the engine at that batch with and without constraints, sampling included.
//
//   walsh-bench constraint --model M.gguf [--batch 8] [--steps 24] [--json FILE]
#ifndef WALSH_TOOLS_BENCH_CONSTRAINT_BENCH_H_
#define WALSH_TOOLS_BENCH_CONSTRAINT_BENCH_H_

namespace walsh {

int ConstraintBenchMain(int argc, char** argv);

}  // namespace walsh

#endif  // WALSH_TOOLS_BENCH_CONSTRAINT_BENCH_H_
