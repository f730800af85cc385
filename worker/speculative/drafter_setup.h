// The drafter a --speculative value names (docs/speculative_decoding.md): none for "off", prompt
// lookup for "ngram", a draft model for "draft:FILE".
#ifndef WALSH_WORKER_SPECULATIVE_DRAFTER_SETUP_H_
#define WALSH_WORKER_SPECULATIVE_DRAFTER_SETUP_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"
#include "worker/engine/kv_manager.h"
#include "worker/speculative/drafter.h"
#include "worker/speculative/ngram_drafter.h"

namespace walsh {

// Refuses anything but off, ngram and draft:FILE (a non-empty FILE), naming the value.
absl::Status ValidateSpeculativeSpec(const std::string& spec);

struct DrafterSetup {
  std::string spec;  // a valid --speculative value
  NgramDraftOptions ngram;
  // A draft model's engine and memory: the target's options and budgets, on one rank, without
  // prefix caching. A request the draft engine has no room for drafts nothing.
  EngineOptions engine;
  CacheOptions caches;
  int64_t max_step_tokens = 0;  // required: the scheduler's token budget per step
};

// nullptr for "off". A draft model is loaded, bound, and checked against `target`
// (DraftModelDrafter::Create); its errors name the file.
absl::StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const DrafterSetup& setup,
                                                     const Engine& target);

}  // namespace walsh

#endif  // WALSH_WORKER_SPECULATIVE_DRAFTER_SETUP_H_
