#include "common/metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/buffer_budget.h"

namespace walsh {
namespace {

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  // The shortest decimal that reads back as the same double.
  char buf[32];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string EscapeHelp(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string EscapeLabel(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string Labels(const std::vector<std::string>& names, const std::vector<std::string>& values,
                   const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, out.empty() ? "" : ",", names[i], "=\"", EscapeLabel(values[i]), "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : ",", extra_name, "=\"", extra_value, "\"");
  }
  return out.empty() ? "" : "{" + out + "}";
}

}  // namespace

void Counter::Inc(double v) {
  MutexLock l(&mu_);
  value_ += v;
}
double Counter::value() const {
  MutexLock l(&mu_);
  return value_;
}
void Gauge::Set(double v) {
  MutexLock l(&mu_);
  value_ = v;
}
void Gauge::Add(double v) {
  MutexLock l(&mu_);
  value_ += v;
}
double Gauge::value() const {
  MutexLock l(&mu_);
  return value_;
}
void Histogram::Observe(double v) {
  MutexLock l(&mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}
uint64_t Histogram::count() const {
  MutexLock l(&mu_);
  return count_;
}

struct MetricFamily::Child {
  Counter counter;
  Gauge gauge;
  std::unique_ptr<Histogram> histogram;
};

MetricFamily::MetricFamily(std::string name, std::string help, MetricType type,
                           std::vector<std::string> label_names, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      bounds_(std::move(bounds)) {}

MetricFamily::~MetricFamily() = default;

MetricFamily::Child& MetricFamily::Get(const std::vector<std::string>& labels) {
  MutexLock l(&mu_);
  std::unique_ptr<Child>& c = children_[labels];
  if (!c) {
    c = std::make_unique<Child>();
    if (type_ == MetricType::kHistogram) c->histogram = std::make_unique<Histogram>(bounds_);
  }
  return *c;
}

void MetricFamily::Clear() {
  MutexLock l(&mu_);
  children_.clear();
}

Counter& MetricFamily::counter(const std::vector<std::string>& labels) {
  return Get(labels).counter;
}
Gauge& MetricFamily::gauge(const std::vector<std::string>& labels) { return Get(labels).gauge; }
Histogram& MetricFamily::histogram(const std::vector<std::string>& labels) {
  return *Get(labels).histogram;
}

void MetricFamily::Write(std::string& out) const {
  static constexpr const char* kTypes[] = {"counter", "gauge", "histogram"};
  absl::StrAppend(&out, "# HELP ", name_, " ", EscapeHelp(help_), "\n# TYPE ", name_, " ",
                  kTypes[static_cast<int>(type_)], "\n");
  MutexLock l(&mu_);
  for (const auto& [values, child] : children_) {
    switch (type_) {
      case MetricType::kCounter:
        absl::StrAppend(&out, name_, Labels(label_names_, values), " ",
                        FormatValue(child->counter.value()), "\n");
        break;
      case MetricType::kGauge:
        absl::StrAppend(&out, name_, Labels(label_names_, values), " ",
                        FormatValue(child->gauge.value()), "\n");
        break;
      case MetricType::kHistogram: {
        const Histogram& h = *child->histogram;
        MutexLock hl(&h.mu_);
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= h.bounds_.size(); ++i) {
          cumulative += h.counts_[i];
          const std::string le = i < h.bounds_.size() ? FormatValue(h.bounds_[i]) : "+Inf";
          absl::StrAppend(&out, name_, "_bucket", Labels(label_names_, values, "le", le), " ",
                          cumulative, "\n");
        }
        absl::StrAppend(&out, name_, "_sum", Labels(label_names_, values), " ", FormatValue(h.sum_),
                        "\n", name_, "_count", Labels(label_names_, values), " ", h.count_, "\n");
        break;
      }
    }
  }
}

MetricFamily& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                          std::vector<std::string> labels) {
  MutexLock l(&mu_);
  families_.push_back(
      std::make_unique<MetricFamily>(name, help, MetricType::kCounter, std::move(labels)));
  return *families_.back();
}

MetricFamily& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                        std::vector<std::string> labels) {
  MutexLock l(&mu_);
  families_.push_back(
      std::make_unique<MetricFamily>(name, help, MetricType::kGauge, std::move(labels)));
  return *families_.back();
}

MetricFamily& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                            std::vector<double> bounds,
                                            std::vector<std::string> labels) {
  MutexLock l(&mu_);
  families_.push_back(std::make_unique<MetricFamily>(name, help, MetricType::kHistogram,
                                                     std::move(labels), std::move(bounds)));
  return *families_.back();
}

void MetricsRegistry::AddCollector(std::function<void()> collect) {
  MutexLock l(&mu_);
  collectors_.push_back(std::move(collect));
}

std::string MetricsRegistry::Serialize() const {
  MutexLock l(&mu_);
  for (const auto& c : collectors_) c();
  std::string out;
  for (const auto& f : families_) f->Write(out);
  return out;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

void AddProcessMetrics(MetricsRegistry& r) {
  Gauge& rss =
      r.AddGauge("process_resident_memory_bytes", "Resident memory size in bytes.").gauge();
  Gauge& vsz = r.AddGauge("process_virtual_memory_bytes", "Virtual memory size in bytes.").gauge();
  Counter& cpu =
      r.AddCounter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.")
          .counter();
  Gauge& fds = r.AddGauge("process_open_fds", "Number of open file descriptors.").gauge();
  Gauge& start = r.AddGauge("process_start_time_seconds",
                            "Start time of the process since unix epoch in seconds.")
                     .gauge();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  double boot_time = 0;
  {
    std::ifstream stat("/proc/stat");
    std::string key;
    while (stat >> key) {
      if (key == "btime") {
        stat >> boot_time;
        break;
      }
    }
  }
  auto last_cpu = std::make_shared<double>(0.0);
  r.AddCollector([=, &rss, &vsz, &cpu, &fds, &start] {
    std::ifstream in("/proc/self/stat");
    std::string line;
    std::getline(in, line);
    // Fields after the parenthesized command name (which may contain spaces).
    const size_t close = line.rfind(')');
    if (close == std::string::npos) return;
    const std::vector<std::string> f = absl::StrSplit(line.substr(close + 2), ' ');
    if (f.size() < 22) return;
    const double cpu_now = (std::stod(f[11]) + std::stod(f[12])) / ticks;  // utime + stime
    cpu.Inc(cpu_now - *last_cpu);
    *last_cpu = cpu_now;
    start.Set(boot_time + std::stod(f[19]) / ticks);  // starttime
    vsz.Set(std::stod(f[20]));
    rss.Set(std::stod(f[21]) * page);
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
      while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
      closedir(d);
    }
    fds.Set(n);
  });
}

void AddBufferMetrics(MetricsRegistry& r, const std::string& prefix, const BufferBudget* budget) {
  Gauge& used = r.AddGauge(prefix + "_buffered_bytes",
                           "Response bytes held for clients that have not read them yet.")
                    .gauge();
  Gauge& limit = r.AddGauge(prefix + "_buffered_bytes_limit",
                            "--max-buffered-total: past it, new streams are refused (0: none).")
                     .gauge();
  Counter& refusals = r.AddCounter(prefix + "_buffer_refusals_total",
                                   "Streams refused because --max-buffered-total was reached.")
                          .counter();
  auto seen = std::make_shared<int64_t>(0);
  r.AddCollector([=, &used, &limit, &refusals] {
    used.Set(static_cast<double>(budget->used()));
    limit.Set(static_cast<double>(budget->limit()));
    const int64_t now = budget->refusals();
    refusals.Inc(static_cast<double>(now - *seen));
    *seen = now;
  });
}

}  // namespace walsh
