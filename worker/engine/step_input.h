// What one step of the engine runs on: each sequence's new tokens (SequenceInput), and the
// memory the KV manager (kv_manager.h) gives it for them (SequenceCache). The engine carries
// out the page tables, slots and copies it is handed; it never decides which page is whose.
#ifndef WALSH_WORKER_ENGINE_STEP_INPUT_H_
#define WALSH_WORKER_ENGINE_STEP_INPUT_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace walsh {

using SequenceId = int64_t;

struct SequenceInput {
  SequenceId id = 0;
  std::vector<int32_t> tokens;  // appended at the sequence's current length
  bool all_logits = false;      // logits for every new token; otherwise for the last one only
  // A speculative step (drafted tokens being verified): the GatedDeltaNet state after every
  // token but the last is kept in a plane (a state slot of the pool) so that the sequence can
  // roll back to any length within the step (SequenceRunner::Rollback), which it must do,
  // keeping all or fewer, before its next step.
  bool keep_states = false;
  // Image inputs (docs/vision.md §4), empty for text. rope_positions: 3 per token, the t, h and w
  // positions of its rotary embedding; a sequence that holds an image passes them with every
  // later step, since its text tokens' M-RoPE positions then trail their places in the sequence.
  // embedding_of_token: per token -1 (its own embedding) or the row of `embeddings`
  // (embedding_length floats each) that replaces it; a replaced token's id may be negative, the
  // image's cache key (image_prompt.h).
  std::vector<int32_t> rope_positions;
  std::vector<int32_t> embedding_of_token;
  std::vector<float> embeddings;
};

// A sequence's memory for one step: its length before the step, its GatedDeltaNet state slot,
// its page table (covering the step's tokens too), and, for a speculative step, the planes that
// keep the state after each of its tokens but the last.
struct SequenceCache {
  int64_t length = 0;
  int32_t slot = -1;
  absl::Span<const int32_t> pages;
  absl::Span<const int32_t> planes;
};

// A copy the engine makes on every rank: a state slot, and a KV page when from_page >= 0;
// from_slot < 0 clears to_slot instead.
struct CacheCopy {
  int32_t from_slot = -1, to_slot = -1;
  int32_t from_page = -1, to_page = -1;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_STEP_INPUT_H_
