// The gateway's Prometheus metrics, as its clients see the service (docs/operations.md "Metrics"
// lists every one).
#ifndef WALSH_GATEWAY_GATEWAY_METRICS_H_
#define WALSH_GATEWAY_GATEWAY_METRICS_H_

#include "common/buffer_budget.h"
#include "common/metrics.h"
#include "gateway/worker_pool.h"

namespace walsh {

struct GatewayMetrics {
  // `buffers`: the process's buffer budget, reported at each scrape (may be null).
  GatewayMetrics(MetricsRegistry& r, WorkerPool* pool, const BufferBudget* buffers);

  MetricFamily& requests;  // by final gRPC status code name
  Histogram& time_to_first_token;
  Histogram& inter_token_latency;
  Histogram& e2e_latency;
  Histogram& cancel_to_free;
  Counter& upstream_attempts;
  Counter& retries;
  Counter& migrations;
  Counter& stalled_streams;
  Gauge& inflight;
  Gauge& queue_depth;
  MetricFamily& worker_inflight;  // per worker address (bounded by the pool)
  MetricFamily& worker_healthy;
  MetricFamily& worker_missed_checks;
  MetricFamily& worker_breaker;  // 0 closed, 1 open, 2 half-open
};

}  // namespace walsh

#endif  // WALSH_GATEWAY_GATEWAY_METRICS_H_
