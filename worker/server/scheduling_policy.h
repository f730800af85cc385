// The scheduler's decisions as pure functions of plain numbers: which waiting request goes
// first, whether it can be admitted now, which running request gives way when KV pages run out,
// and how one step's token budget is shared. No threads, no engine, no clock: the scheduler
// (scheduler.h) feeds them what it sees and acts on the answer; tests drive them directly.
#ifndef WALSH_WORKER_SERVER_SCHEDULING_POLICY_H_
#define WALSH_WORKER_SERVER_SCHEDULING_POLICY_H_

#include <cstdint>
#include <span>
#include <vector>

namespace walsh {

// Where a request stands in the queue.
struct QueuePosition {
  int32_t priority = 0;  // higher first
  uint64_t arrival = 0;  // then first come, first served
};

// True when `a` is admitted before `b`.
bool AdmittedBefore(const QueuePosition& a, const QueuePosition& b);

// What the engine has free when the head of the queue is considered.
struct Capacity {
  int64_t running = 0, max_running = 0;  // sequences in the batch, and its limit
  int64_t state_slots_free = 0;          // GatedDeltaNet state slots
  int64_t kv_pages_free = 0, kv_pages_total = 0;
  int64_t page_size = 1;  // tokens per KV page
  bool uses_kv = true;    // false for a model without attention layers
  // Pages of the candidate that it will share with sequences already running (a prefix-cache
  // hit on pages in use): they need not be free.
  int64_t shared_pages = 0;
  // Pages the running requests will still take for the tokens they have (the rest of their
  // input, and the token each samples next): free now, but promised (PagesStillToTake).
  int64_t kv_pages_reserved = 0;
};

enum class Admission {
  kAdmit,      // take it now
  kWait,       // not now: it fits once running requests finish (admission stops here)
  kNeverFits,  // its tokens need more KV pages than the whole cache: refuse it
};

// KV pages a sequence of `tokens` needs to be admitted: its tokens and the one it will sample.
int64_t PagesToAdmit(int64_t tokens, int64_t page_size);

// Pages a running request of `tokens` tokens (input and output so far) holding `pages_held`
// pages will still take before it samples its next token: its reservation. It grows with every
// token it samples; pages shared with other sequences count as held.
int64_t PagesStillToTake(int64_t tokens, int64_t pages_held, int64_t page_size);

// Admits a request of `tokens` when a batch place, a state slot and its pages can be had: the
// pages of its input and first sampled token, less those it shares with running sequences,
// out of the free pages no running request has reserved.
Admission DecideAdmission(int64_t tokens, const Capacity& capacity);

// The running request that gives way when pages run out: the one that arrived last (vLLM's
// rule). It re-queues at the front keeping its arrival, so it is also the first to give way
// again. Returns its index in `arrivals`, or -1 when fewer than two run (one request alone is
// never preempted: it would only come back to the same shortage).
int64_t PreemptionVictim(std::span<const uint64_t> arrivals);

// A running request as the batch builder sees it.
struct BatchCandidate {
  int64_t remaining = 0;        // tokens the engine has not seen yet
  bool decode = false;          // one token, sampled by the previous step
  int64_t until_snapshot = -1;  // tokens up to the next snapshot point; -1: none
};

// Tokens each candidate feeds this step (0: not in the batch). Decodes go first, then prefill
// chunks, in candidate order, until `budget` tokens; a chunk ends at a snapshot point. Where a
// prefill is cut never changes a result: the engine is schedule-invariant.
std::vector<int64_t> PlanBatch(std::span<const BatchCandidate> candidates, int64_t budget);

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_SCHEDULING_POLICY_H_
