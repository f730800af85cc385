// The worker's Prometheus metrics (docs/operations.md "Metrics" lists every one).
#ifndef WALSH_WORKER_SERVER_WORKER_METRICS_H_
#define WALSH_WORKER_SERVER_WORKER_METRICS_H_

#include <memory>

#include "common/metrics.h"
#include "constraint/constraint_cache.h"

namespace walsh {

struct WorkerMetrics {
  explicit WorkerMetrics(MetricsRegistry& r);

  MetricFamily& requests;  // by finish_reason
  Counter& prompt_tokens;
  Counter& generation_tokens;
  Histogram& time_to_first_token;
  Histogram& inter_token_latency;
  Histogram& e2e_latency;
  Histogram& queue_time;
  Histogram& step_duration;
  Histogram& batch_size;
  Counter& preemptions;
  Counter& stalled_streams;
  Gauge& held_requests;
  Gauge& kv_pages_used;
  Gauge& kv_pages_total;
  Gauge& weight_resident_bytes;
  Gauge& weight_hugepage_bytes;
  Gauge& state_slots_used;
  Gauge& state_slots_total;
  Gauge& running;
  Gauge& waiting;
  Gauge& vllm_waiting;
  Gauge& vllm_running;
  Gauge& vllm_kv_usage;
  Counter& spec_drafts;                // vllm:spec_decode_num_drafts_total
  Counter& spec_draft_tokens;          // vllm:spec_decode_num_draft_tokens_total
  Counter& spec_accepted_tokens;       // vllm:spec_decode_num_accepted_tokens_total
  MetricFamily& spec_accepted_at;      // by position (1 .. k) in the draft
  Counter& prefix_queries;             // vllm:prefix_cache_queries_total, in tokens
  Counter& prefix_hits;                // vllm:prefix_cache_hits_total, in tokens
  MetricFamily& prefix_lookups;        // by outcome
  MetricFamily& prefix_snapshots;      // snapshots taken, by where
  MetricFamily& prefix_evictions;      // by kind: page, snapshot
  MetricFamily& prefix_cache_bytes;    // by kind: pages, snapshots
  MetricFamily& prefix_cache_entries;  // by kind: pages, snapshots
  MetricFamily& constraint_lookups;    // by outcome: hit, miss
  Gauge& constraint_cache_bytes;
  Gauge& constraint_cache_entries;
  MetricFamily& constraint_contexts;  // by state: cached, warming
  Counter& constraint_deferred;       // samples that waited a step for their mask
  Counter& constraint_exhausted;      // requests ended by a mask's budget
  MetricFamily& device_memory;        // by kind: used, total, weights, kv_cache, state
  MetricFamily& rank_cache;           // by rank and kind: kv_cache, state
  MetricFamily& kv_bytes_per_token;
  MetricFamily& build_info;
  MetricFamily& model_info;
  // vLLM's name, for the Gateway API Inference Extension: the KV cache's page size and count.
  MetricFamily& vllm_cache_config;
};

// Refreshes the constraint cache's metrics before every scrape, while the cache exists.
void CollectConstraintMetrics(MetricsRegistry& r, WorkerMetrics& m,
                              std::weak_ptr<const ConstraintCache> cache);

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_WORKER_METRICS_H_
