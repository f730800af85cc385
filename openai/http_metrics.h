// The OpenAI-compatible HTTP face's metrics, named under the serving process's prefix
// (walsh_gateway_http_*, walsh_worker_http_*): requests by route and status, their duration,
// the streams closed because their client stopped reading, and the image URLs fetched.
#ifndef WALSH_OPENAI_HTTP_METRICS_H_
#define WALSH_OPENAI_HTTP_METRICS_H_

#include <string>

#include "common/metrics.h"

namespace walsh {

struct HttpMetrics {
  HttpMetrics(MetricsRegistry& r, const std::string& prefix);

  MetricFamily& requests;  // by route and HTTP status (499: the client left first)
  MetricFamily& duration;  // by route
  Counter& stalled_streams;
  MetricFamily& image_fetches;  // by outcome: ok, refused (the host), timeout, failed
  Histogram& image_fetch_duration;
};

}  // namespace walsh

#endif  // WALSH_OPENAI_HTTP_METRICS_H_
