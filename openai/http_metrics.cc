#include "openai/http_metrics.h"

namespace walsh {

HttpMetrics::HttpMetrics(MetricsRegistry& r, const std::string& prefix)
    : requests(r.AddCounter(prefix + "_requests_total",
                            "HTTP API requests by route and status code (499: the client hung up "
                            "first).",
                            {"route", "code"})),
      duration(r.AddHistogram(prefix + "_request_duration_seconds",
                              "From an HTTP API request's headers to the end of its answer.",
                              LatencyBuckets(), {"route"})),
      stalled_streams(r.AddCounter(prefix + "_stalled_streams_total",
                                   "HTTP event streams closed because their client read nothing "
                                   "for --http-stall-timeout-seconds while their buffer was full.")
                          .counter()),
      image_fetches(
          r.AddCounter(prefix + "_image_fetches_total",
                       "Image URLs in chat requests, by outcome: ok, refused (a host and port off "
                       "--allowed-media-domains), failed (whatever the origin did; the log says).",
                       {"outcome"})),
      image_fetch_duration(r.AddHistogram(prefix + "_image_fetch_duration_seconds",
                                          "Fetching one image URL, redirects included "
                                          "(refusals by host not counted).",
                                          LatencyBuckets())
                               .histogram()) {}

}  // namespace walsh
