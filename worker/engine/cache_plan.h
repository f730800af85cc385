// How cache memory is shared out: one function turns the budgets (flags) and the room a device
// reports for caches (Backend::cache_bytes_available) into KV pages, GatedDeltaNet state slots
// and the prefix cache's snapshot slots. Sizes are counted at TP = 1 (each rank holds its heads'
// part of every page and slot). Pure arithmetic: the KV manager is built on the plan
// (KvManager::Plan) and the engine allocates it (Engine::AllocateCaches).
#ifndef WALSH_WORKER_ENGINE_CACHE_PLAN_H_
#define WALSH_WORKER_ENGINE_CACHE_PLAN_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace walsh {

struct CacheBudget {
  int64_t kv_cache_bytes = 0, state_bytes = 0;  // the pools' budgets
  int64_t kv_pages = 0, state_slots = 0;        // if > 0: exact counts, whatever the bytes say
  int64_t snapshot_bytes = 0;                   // the prefix cache's snapshots (0: none)
  int64_t room = INT64_MAX;                     // what the device can give for caches
};

// What one KV page and one state slot take (all ranks together), as the engine stores them
// (Engine::CacheUnitsFor); uses_kv is false for a model without attention layers.
struct CacheUnits {
  int64_t page_bytes = 0, slot_bytes = 0;
  bool uses_kv = true;
};

struct CachePlan {
  int64_t pages = 0, slots = 0, snapshot_slots = 0;
};

// Slots come first and must fit the room whole; a device with less room cuts the pages, and
// the snapshots get what is left. An error names the budget that holds nothing.
absl::StatusOr<CachePlan> PlanCaches(const CacheBudget& budget, int64_t page_bytes,
                                     int64_t slot_bytes);

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_CACHE_PLAN_H_
