// A small Prometheus metrics registry: counters, gauges and histograms with fixed label names,
// written out in the Prometheus text exposition format 0.0.4. Thread-safe. Label sets stay
// bounded because callers only use label values from small fixed sets.
#ifndef WALSH_COMMON_METRICS_H_
#define WALSH_COMMON_METRICS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace walsh {

class MetricFamily;

class Counter {
 public:
  void Inc(double v = 1.0);
  double value() const;

 private:
  friend class MetricFamily;
  mutable Mutex mu_;
  double value_ ABSL_GUARDED_BY(mu_) = 0;
};

class Gauge {
 public:
  void Set(double v);
  void Add(double v);
  double value() const;

 private:
  friend class MetricFamily;
  mutable Mutex mu_;
  double value_ ABSL_GUARDED_BY(mu_) = 0;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void Observe(double v);
  uint64_t count() const;

 private:
  friend class MetricFamily;
  mutable Mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, not cumulative; last is +Inf
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

enum class MetricType { kCounter, kGauge, kHistogram };

// One metric name with its help text, type and label names; children per label values.
class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, MetricType type,
               std::vector<std::string> label_names, std::vector<double> bounds = {});
  ~MetricFamily();

  // The child for these label values (one per label name, in order); created on first use.
  Counter& counter(const std::vector<std::string>& labels = {});
  Gauge& gauge(const std::vector<std::string>& labels = {});
  Histogram& histogram(const std::vector<std::string>& labels = {});

  void Write(std::string& out) const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& name() const { return name_; }
  // Drops every child (for label sets rebuilt at each scrape, e.g. per-worker gauges).
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Child;
  Child& Get(const std::vector<std::string>& labels) ABSL_LOCKS_EXCLUDED(mu_);

  std::string name_, help_;
  MetricType type_;
  std::vector<std::string> label_names_;
  std::vector<double> bounds_;
  mutable Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Child>> children_ ABSL_GUARDED_BY(mu_);
};

class MetricsRegistry {
 public:
  MetricFamily& AddCounter(const std::string& name, const std::string& help,
                           std::vector<std::string> labels = {});
  MetricFamily& AddGauge(const std::string& name, const std::string& help,
                         std::vector<std::string> labels = {});
  MetricFamily& AddHistogram(const std::string& name, const std::string& help,
                             std::vector<double> bounds, std::vector<std::string> labels = {});
  // Runs before every scrape (to refresh gauges such as process metrics).
  void AddCollector(std::function<void()> collect);

  // The whole registry in the Prometheus text format, families in registration order.
  std::string Serialize() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  std::vector<std::unique_ptr<MetricFamily>> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
};

// Buckets for latencies in seconds, 1 ms to ~1 min.
std::vector<double> LatencyBuckets();
// process_* metrics as every Prometheus client exports them, from /proc/self.
void AddProcessMetrics(MetricsRegistry& registry);
class BufferBudget;
// PREFIX_buffered_bytes, PREFIX_buffered_bytes_limit and PREFIX_buffer_refusals_total from the
// process's buffer budget (common/buffer_budget.h), read at each scrape.
void AddBufferMetrics(MetricsRegistry& registry, const std::string& prefix,
                      const BufferBudget* budget);

}  // namespace walsh

#endif  // WALSH_COMMON_METRICS_H_
