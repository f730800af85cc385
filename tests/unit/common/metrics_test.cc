// The metrics registry's exposition, byte for byte: what Prometheus's text format 0.0.4 says a
// scrape must look like (promtool and a real Prometheus server check it end to end in
// tests/integration).
#include "common/metrics.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace walsh {
namespace {

TEST(MetricsExposition, CountersAndGaugesWithLabelsInRegistrationOrder) {
  MetricsRegistry registry;
  MetricFamily& requests =
      registry.AddCounter("walsh_requests_total", "Requests by outcome.", {"outcome"});
  MetricFamily& running = registry.AddGauge("walsh_running", "Requests running now.");
  requests.counter({"stop"}).Inc();
  requests.counter({"stop"}).Inc(2);
  requests.counter({"error"}).Inc();
  running.gauge().Set(5);
  running.gauge().Add(-1.5);
  EXPECT_EQ(registry.Serialize(),
            "# HELP walsh_requests_total Requests by outcome.\n"
            "# TYPE walsh_requests_total counter\n"
            "walsh_requests_total{outcome=\"error\"} 1\n"
            "walsh_requests_total{outcome=\"stop\"} 3\n"
            "# HELP walsh_running Requests running now.\n"
            "# TYPE walsh_running gauge\n"
            "walsh_running 3.5\n");
}

TEST(MetricsExposition, AFamilyWithoutChildrenStillSaysWhatItIs) {
  MetricsRegistry registry;
  registry.AddCounter("walsh_unused_total", "Never incremented.", {"reason"});
  EXPECT_EQ(registry.Serialize(),
            "# HELP walsh_unused_total Never incremented.\n"
            "# TYPE walsh_unused_total counter\n");
}

TEST(MetricsExposition, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  MetricsRegistry registry;
  MetricFamily& latency =
      registry.AddHistogram("walsh_latency_seconds", "Latency.", {0.1, 1, 2.5}, {"route"});
  Histogram& h = latency.histogram({"chat"});
  for (double v : {0.05, 0.1, 0.7, 3.0, 10.0}) h.Observe(v);
  EXPECT_EQ(h.count(), 5u);
  EXPECT_EQ(registry.Serialize(),
            "# HELP walsh_latency_seconds Latency.\n"
            "# TYPE walsh_latency_seconds histogram\n"
            "walsh_latency_seconds_bucket{route=\"chat\",le=\"0.1\"} 2\n"
            "walsh_latency_seconds_bucket{route=\"chat\",le=\"1\"} 3\n"
            "walsh_latency_seconds_bucket{route=\"chat\",le=\"2.5\"} 3\n"
            "walsh_latency_seconds_bucket{route=\"chat\",le=\"+Inf\"} 5\n"
            "walsh_latency_seconds_sum{route=\"chat\"} 13.85\n"
            "walsh_latency_seconds_count{route=\"chat\"} 5\n");
}

TEST(MetricsExposition, EscapesHelpAndLabelValues) {
  MetricsRegistry registry;
  MetricFamily& f =
      registry.AddGauge("walsh_escaped", "A back\\slash and a\nnewline \"kept\".", {"path"});
  f.gauge({"C:\\dir \"q\"\nnext"}).Set(1);
  EXPECT_EQ(registry.Serialize(),
            "# HELP walsh_escaped A back\\\\slash and a\\nnewline \"kept\".\n"
            "# TYPE walsh_escaped gauge\n"
            "walsh_escaped{path=\"C:\\\\dir \\\"q\\\"\\nnext\"} 1\n");
}

TEST(MetricsExposition, ValuesReadBackExactly) {
  MetricsRegistry registry;
  MetricFamily& f = registry.AddGauge("walsh_value", "Values.", {"kind"});
  f.gauge({"a_third"}).Set(1.0 / 3.0);
  f.gauge({"big"}).Set(12345678901234.0);
  f.gauge({"nan"}).Set(std::nan(""));
  f.gauge({"neg_inf"}).Set(-std::numeric_limits<double>::infinity());
  f.gauge({"pos_inf"}).Set(std::numeric_limits<double>::infinity());
  f.gauge({"tiny"}).Set(1e-300);
  const std::string text = registry.Serialize();
  EXPECT_NE(text.find("walsh_value{kind=\"a_third\"} 0.3333333333333333\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("walsh_value{kind=\"big\"} 12345678901234\n"), std::string::npos);
  EXPECT_NE(text.find("walsh_value{kind=\"nan\"} NaN\n"), std::string::npos);
  EXPECT_NE(text.find("walsh_value{kind=\"neg_inf\"} -Inf\n"), std::string::npos);
  EXPECT_NE(text.find("walsh_value{kind=\"pos_inf\"} +Inf\n"), std::string::npos);
  EXPECT_NE(text.find("walsh_value{kind=\"tiny\"} 1e-300\n"), std::string::npos);
}

TEST(MetricsExposition, CollectorsRunBeforeEveryScrapeAndClearDropsChildren) {
  MetricsRegistry registry;
  MetricFamily& per_worker = registry.AddGauge("walsh_worker_up", "Up.", {"worker"});
  int scrapes = 0;
  registry.AddCollector([&] {
    per_worker.Clear();
    ++scrapes;
    per_worker.gauge({"w" + std::to_string(scrapes)}).Set(1);
  });
  EXPECT_NE(registry.Serialize().find("walsh_worker_up{worker=\"w1\"} 1\n"), std::string::npos);
  const std::string second = registry.Serialize();
  EXPECT_EQ(second.find("w1"), std::string::npos) << second;
  EXPECT_NE(second.find("walsh_worker_up{worker=\"w2\"} 1\n"), std::string::npos);
}

}  // namespace
}  // namespace walsh
