#include "worker/server/worker_metrics.h"

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace walsh {

WorkerMetrics::WorkerMetrics(MetricsRegistry& r)
    : requests(r.AddCounter("walsh_worker_requests_total",
                            "Finished generation requests by finish reason.", {"finish_reason"})),
      prompt_tokens(
          r.AddCounter("walsh_worker_prompt_tokens_total", "Prompt tokens processed.").counter()),
      generation_tokens(
          r.AddCounter("walsh_worker_generation_tokens_total", "Tokens generated.").counter()),
      time_to_first_token(r.AddHistogram("walsh_worker_time_to_first_token_seconds",
                                         "From arrival to the first generated token.",
                                         LatencyBuckets())
                              .histogram()),
      inter_token_latency(r.AddHistogram("walsh_worker_inter_token_latency_seconds",
                                         "Between consecutive generated tokens of a request.",
                                         LatencyBuckets())
                              .histogram()),
      e2e_latency(r.AddHistogram("walsh_worker_e2e_request_latency_seconds",
                                 "From arrival to the end of a request.", LatencyBuckets())
                      .histogram()),
      queue_time(r.AddHistogram("walsh_worker_queue_time_seconds",
                                "From arrival to admission into the running batch.",
                                LatencyBuckets())
                     .histogram()),
      step_duration(r.AddHistogram("walsh_worker_step_duration_seconds",
                                   "One scheduler step (a forward pass over the batch).",
                                   LatencyBuckets())
                        .histogram()),
      batch_size(r.AddHistogram("walsh_worker_batch_size_tokens", "Tokens in one forward pass.",
                                {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048})
                     .histogram()),
      preemptions(r.AddCounter("walsh_worker_preemptions_total",
                               "Sequences preempted (state freed, recomputed later) for KV pages.")
                      .counter()),
      stalled_streams(r.AddCounter("walsh_worker_stalled_streams_total",
                                   "Streams cancelled because their client read nothing for "
                                   "--stall-timeout-seconds (or overflowed --max-buffered-bytes).")
                          .counter()),
      held_requests(r.AddGauge("walsh_worker_held_requests",
                               "Running requests not decoded because their client has not read "
                               "--max-buffered-bytes of their output.")
                        .gauge()),
      kv_pages_used(r.AddGauge("walsh_worker_kv_pages_used", "KV cache pages in use.").gauge()),
      kv_pages_total(
          r.AddGauge("walsh_worker_kv_pages_capacity", "KV cache pages in the pool.").gauge()),
      weight_resident_bytes(
          r.AddGauge("walsh_worker_weight_resident_bytes",
                     "Bytes of the model's weights resident in memory (/proc/self/smaps).")
              .gauge()),
      weight_hugepage_bytes(r.AddGauge("walsh_worker_weight_hugepage_bytes",
                                       "Bytes of the resident weights in huge pages "
                                       "(/proc/self/smaps).")
                                .gauge()),
      state_slots_used(
          r.AddGauge("walsh_worker_state_slots_used", "GatedDeltaNet state slots in use.").gauge()),
      state_slots_total(
          r.AddGauge("walsh_worker_state_slots_capacity", "GatedDeltaNet state slots in the pool.")
              .gauge()),
      running(
          r.AddGauge("walsh_worker_requests_running", "Requests in the running batch.").gauge()),
      waiting(
          r.AddGauge("walsh_worker_requests_waiting", "Requests waiting for admission.").gauge()),
      vllm_waiting(r.AddGauge("vllm:num_requests_waiting",
                              "Requests waiting (Gateway API Inference Extension protocol).")
                       .gauge()),
      vllm_running(r.AddGauge("vllm:num_requests_running",
                              "Requests running (Gateway API Inference Extension protocol).")
                       .gauge()),
      vllm_kv_usage(r.AddGauge("vllm:kv_cache_usage_perc",
                               "KV cache usage, 0 to 1 (Gateway API Inference Extension protocol).")
                        .gauge()),
      spec_drafts(r.AddCounter("vllm:spec_decode_num_drafts_total",
                               "Speculative steps: decode steps that verified drafted tokens.")
                      .counter()),
      spec_draft_tokens(r.AddCounter("vllm:spec_decode_num_draft_tokens_total",
                                     "Tokens drafted for verification.")
                            .counter()),
      spec_accepted_tokens(r.AddCounter("vllm:spec_decode_num_accepted_tokens_total",
                                        "Drafted tokens accepted: each equals the token the "
                                        "model sampled at its position.")
                               .counter()),
      spec_accepted_at(r.AddCounter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                    "Drafted tokens accepted, by position in the draft (1 is "
                                    "the first drafted token).",
                                    {"position"})),
      prefix_queries(r.AddCounter("vllm:prefix_cache_queries_total",
                                  "Prompt tokens looked up in the prefix cache (each admission).")
                         .counter()),
      prefix_hits(r.AddCounter("vllm:prefix_cache_hits_total",
                               "Prompt tokens restored from the prefix cache instead of computed.")
                      .counter()),
      prefix_lookups(r.AddCounter("walsh_worker_prefix_cache_lookups_total",
                                  "Prefix-cache lookups at admission by outcome: hit, no_prefix, "
                                  "no_snapshot (pages cached, no snapshot on them), no_room.",
                                  {"outcome"})),
      prefix_snapshots(r.AddCounter("walsh_worker_prefix_cache_snapshots_total",
                                    "GatedDeltaNet state snapshots taken, by where: prompt (a "
                                    "prompt's end), branch (the end of a cached prefix a request "
                                    "extends), finish (a finished request's end).",
                                    {"at"})),
      prefix_evictions(r.AddCounter("walsh_worker_prefix_cache_evictions_total",
                                    "Prefix-cache entries evicted, by kind: page, snapshot.",
                                    {"kind"})),
      prefix_cache_bytes(r.AddGauge("walsh_worker_prefix_cache_bytes",
                                    "Bytes the prefix cache holds, by kind: pages (shared KV "
                                    "pages, in use or not), snapshots (state slots and their "
                                    "partial pages).",
                                    {"kind"})),
      prefix_cache_entries(r.AddGauge("walsh_worker_prefix_cache_entries",
                                      "Entries in the prefix cache, by kind: pages, snapshots.",
                                      {"kind"})),
      constraint_lookups(r.AddCounter("walsh_worker_constraint_cache_lookups_total",
                                      "Structured-output constraints looked up in the compiled "
                                      "constraint cache, by outcome: hit, miss (compiled).",
                                      {"outcome"})),
      constraint_cache_bytes(r.AddGauge("walsh_worker_constraint_cache_bytes",
                                        "Bytes of compiled constraints and their token masks.")
                                 .gauge()),
      constraint_cache_entries(
          r.AddGauge("walsh_worker_constraint_cache_entries", "Compiled constraints cached.")
              .gauge()),
      constraint_contexts(
          r.AddGauge("walsh_worker_constraint_contexts",
                     "Grammar contexts of the cached constraints, by state: "
                     "cached (their masks computed), warming (found from the "
                     "grammar, waiting for the mask threads, of constraints a request uses).",
                     {"state"})),
      constraint_deferred(r.AddCounter("walsh_worker_constraint_deferred_samples_total",
                                       "Constrained samples that waited for their token mask "
                                       "while the other requests stepped on.")
                              .counter()),
      constraint_exhausted(r.AddCounter("walsh_worker_constraint_exhausted_total",
                                        "Requests ended because one token's constraint work ran "
                                        "past --constraint-mask-work or "
                                        "--constraint-mask-timeout-ms.")
                               .counter()),
      device_memory(r.AddGauge("walsh_worker_device_memory_bytes",
                               "Accelerator memory in bytes by kind: used and total on the device, "
                               "and what the engine holds for weights, kv_cache and state (the "
                               "CPU backend reports its caches only).",
                               {"kind"})),
      rank_cache(r.AddGauge("walsh_worker_rank_cache_bytes",
                            "KV cache and GatedDeltaNet state each tensor-parallel rank holds "
                            "(its heads only), by rank and kind.",
                            {"rank", "kind"})),
      kv_bytes_per_token(r.AddGauge("walsh_worker_kv_bytes_per_token",
                                    "Bytes of KV cache one token takes in every attention layer, "
                                    "by the pages' storage dtype.",
                                    {"dtype"})),
      build_info(r.AddGauge("walsh_build_info", "walsh build; always 1.", {"version", "kernels"})),
      model_info(r.AddGauge("walsh_model_info", "The served model; always 1.",
                            {"architecture", "format", "name", "fingerprint"})),
      vllm_cache_config(
          r.AddGauge("vllm:cache_config_info",
                     "KV cache configuration; always 1 (Gateway API Inference "
                     "Extension protocol: block_size and num_gpu_blocks).",
                     {"block_size", "num_gpu_blocks", "cache_dtype", "enable_prefix_caching"})) {}

void CollectConstraintMetrics(MetricsRegistry& r, WorkerMetrics& m,
                              std::weak_ptr<const ConstraintCache> cache) {
  // The cache counts lookups itself; each scrape adds what it counted since the one before.
  struct Seen {
    Mutex mu;
    int64_t hits ABSL_GUARDED_BY(mu) = 0;
    int64_t misses ABSL_GUARDED_BY(mu) = 0;
  };
  auto seen = std::make_shared<Seen>();
  r.AddCollector([&m, cache = std::move(cache), seen] {
    const std::shared_ptr<const ConstraintCache> c = cache.lock();
    if (c == nullptr) return;
    {
      MutexLock lock(&seen->mu);
      const int64_t hits = c->hits(), misses = c->misses();
      m.constraint_lookups.counter({"hit"}).Inc(static_cast<double>(hits - seen->hits));
      m.constraint_lookups.counter({"miss"}).Inc(static_cast<double>(misses - seen->misses));
      seen->hits = hits;
      seen->misses = misses;
    }
    m.constraint_cache_bytes.Set(static_cast<double>(c->bytes()));
    m.constraint_cache_entries.Set(static_cast<double>(c->entries()));
    m.constraint_contexts.gauge({"cached"}).Set(static_cast<double>(c->cached_contexts()));
    m.constraint_contexts.gauge({"warming"}).Set(static_cast<double>(c->contexts_to_warm()));
  });
}

}  // namespace walsh
