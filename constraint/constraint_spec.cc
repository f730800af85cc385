#include "constraint/constraint_spec.h"

#include <pthread.h>

#include "constraint/ebnf_parser.h"
#include "constraint/json_schema_compiler.h"
#include "constraint/regex_compiler.h"

namespace walsh {

absl::StatusOr<Grammar> ConstraintGrammar(const ConstraintSpec& spec) {
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonSchema:
      return JsonSchemaGrammar(spec.text);
    case ConstraintSpec::Kind::kJsonObject:
      return JsonObjectGrammar();
    case ConstraintSpec::Kind::kRegex:
      return RegexGrammar(spec.text);
    case ConstraintSpec::Kind::kGrammar:
      return ParseEbnf(spec.text);
  }
  return absl::InvalidArgumentError("an unknown constraint kind");
}

absl::StatusOr<Grammar> ConstraintGrammarOnOwnStack(const ConstraintSpec& spec) {
  struct Job {
    const ConstraintSpec* spec;
    absl::StatusOr<Grammar> result = absl::InternalError("not run");
  } job{&spec};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 16 << 20);
  pthread_t thread;
  const int err = pthread_create(
      &thread, &attr,
      [](void* p) -> void* {
        auto* j = static_cast<Job*>(p);
        j->result = ConstraintGrammar(*j->spec);
        return nullptr;
      },
      &job);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    return absl::ResourceExhaustedError("no thread to compile the constraint on");
  }
  pthread_join(thread, nullptr);
  return std::move(job.result);
}

}  // namespace walsh
