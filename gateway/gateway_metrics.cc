#include "gateway/gateway_metrics.h"

namespace walsh {

GatewayMetrics::GatewayMetrics(MetricsRegistry& r, WorkerPool* pool, const BufferBudget* buffers)
    : requests(r.AddCounter("walsh_gateway_requests_total", "Generate calls by final status.",
                            {"code"})),
      time_to_first_token(r.AddHistogram("walsh_gateway_time_to_first_token_seconds",
                                         "From the client's call to its first token.",
                                         LatencyBuckets())
                              .histogram()),
      inter_token_latency(r.AddHistogram("walsh_gateway_inter_token_latency_seconds",
                                         "Between tokens as the client receives them.",
                                         LatencyBuckets())
                              .histogram()),
      e2e_latency(r.AddHistogram("walsh_gateway_e2e_request_latency_seconds",
                                 "From the client's call to the end of its stream.",
                                 LatencyBuckets())
                      .histogram()),
      cancel_to_free(r.AddHistogram("walsh_gateway_cancel_to_free_seconds",
                                    "From a client's cancel (or its stall) to the release of its "
                                    "stream's place.",
                                    LatencyBuckets())
                         .histogram()),
      upstream_attempts(r.AddCounter("walsh_gateway_upstream_attempts_total",
                                     "Calls made to workers (first tries, retries and resumes).")
                            .counter()),
      retries(r.AddCounter("walsh_gateway_retries_total",
                           "Calls retried on another worker before their first token.")
                  .counter()),
      migrations(
          r.AddCounter("walsh_gateway_migrations_total",
                       "Streams resumed on another worker after their worker failed mid-stream.")
              .counter()),
      stalled_streams(r.AddCounter("walsh_gateway_stalled_streams_total",
                                   "gRPC streams cancelled because their client read nothing for "
                                   "--stall-timeout-seconds (or overflowed --max-buffered-bytes).")
                          .counter()),
      inflight(
          r.AddGauge("walsh_gateway_inflight_streams", "Client streams being served.").gauge()),
      queue_depth(
          r.AddGauge("walsh_gateway_queue_depth", "Client streams waiting for admission.").gauge()),
      worker_inflight(
          r.AddGauge("walsh_gateway_worker_inflight", "Open streams per worker.", {"worker"})),
      worker_healthy(r.AddGauge("walsh_gateway_worker_healthy",
                                "1 if the worker is SERVING with the pool's model.", {"worker"})),
      worker_missed_checks(r.AddGauge(
          "walsh_gateway_worker_missed_checks",
          "Health checks to the worker timed out in a row (--worker-check-misses takes it out of "
          "routing).",
          {"worker"})),
      worker_breaker(r.AddGauge("walsh_gateway_worker_breaker_state",
                                "Circuit breaker: 0 closed, 1 open, 2 half-open.", {"worker"})) {
  if (buffers != nullptr) AddBufferMetrics(r, "walsh_gateway", buffers);
  r.AddCollector([this, pool] {
    worker_inflight.Clear();
    worker_healthy.Clear();
    worker_missed_checks.Clear();
    worker_breaker.Clear();
    for (const auto& w : pool->All()) {
      worker_inflight.gauge({w->address}).Set(static_cast<double>(w->outstanding.load()));
      worker_healthy.gauge({w->address}).Set(w->Routable() ? 1 : 0);
      worker_missed_checks.gauge({w->address}).Set(static_cast<double>(w->missed_checks.load()));
      worker_breaker.gauge({w->address}).Set(static_cast<double>(w->breaker.state()));
    }
  });
}

}  // namespace walsh
