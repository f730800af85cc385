#include "gateway/worker_pool.h"

#include <netdb.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/json_log.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace walsh {

WorkerEndpoint::WorkerEndpoint(std::string addr, const WorkerChannelOptions& options,
                               const BreakerOptions& breaker_options)
    : address(std::move(addr)), breaker(breaker_options) {
  const auto keepalive = options.keepalive;
  grpc::ChannelArguments args;
  // Fail fast on a dead worker instead of waiting for reconnect backoff.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Backpressure: a stream whose client does not read stops being read here, and its worker must
  // feel that within a window, not after BDP probing grew the window to megabytes of copies.
  // Token streams need no more than the initial 64 KiB window.
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  if (keepalive.count() > 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(keepalive.count()));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(keepalive.count()));
    // A silent worker is what the pings probe: never hold them back for want of data.
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    args.SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS,
                static_cast<int>(keepalive.count()));
  }
  if (options.credentials != nullptr && !options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  const auto credentials =
      options.credentials ? options.credentials : grpc::InsecureChannelCredentials();
  channel = grpc::CreateCustomChannel(address, credentials, args);
  generator = v1::Generator::NewStub(channel);
  worker = v1::Worker::NewStub(channel);
  // A subchannel pool of its own: gRPC would otherwise share the streams' connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  check_channel = grpc::CreateCustomChannel(address, credentials, args);
  check_generator = v1::Generator::NewStub(check_channel);
  check_worker = v1::Worker::NewStub(check_channel);
}

WorkerPool::WorkerPool(WorkerPoolOptions options) : options_(std::move(options)) {
  fingerprint_ = options_.expected_fingerprint;
  for (const std::string& a : options_.static_workers) {
    workers_[a] = std::make_shared<WorkerEndpoint>(a, options_.channel, options_.breaker);
  }
  thread_ = std::thread([this] { Loop(); });
}

WorkerPool::~WorkerPool() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

std::vector<std::shared_ptr<WorkerEndpoint>> WorkerPool::All() {
  MutexLock l(&mu_);
  std::vector<std::shared_ptr<WorkerEndpoint>> out;
  for (auto& [a, w] : workers_) out.push_back(w);
  return out;
}

std::vector<std::shared_ptr<WorkerEndpoint>> WorkerPool::Candidates() {
  std::vector<std::shared_ptr<WorkerEndpoint>> out;
  for (auto& w : All()) {
    if (w->Routable() && w->breaker.state() != CircuitBreaker::State::kOpen) out.push_back(w);
  }
  return out;
}

std::string WorkerPool::fingerprint() const {
  MutexLock l(&mu_);
  return fingerprint_;
}

bool WorkerPool::WaitForAny(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (!Candidates().empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return !Candidates().empty();
}

void WorkerPool::Resolve() {
  const size_t colon = options_.dns.rfind(':');
  if (colon == std::string::npos) return;
  const std::string host = options_.dns.substr(0, colon), port = options_.dns.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) {
    LogJson("warning", "dns_failed", {{"name", options_.dns}});
    return;
  }
  std::set<std::string> found;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char ip[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, ip, sizeof ip, nullptr, 0, NI_NUMERICHOST) == 0) {
      const std::string s = a->ai_family == AF_INET6 ? absl::StrCat("[", ip, "]:", port)
                                                     : absl::StrCat(ip, ":", port);
      found.insert(s);
    }
  }
  freeaddrinfo(res);
  MutexLock l(&mu_);
  std::set<std::string> statics(options_.static_workers.begin(), options_.static_workers.end());
  for (const std::string& a : found) {
    if (!workers_.count(a)) {
      workers_[a] = std::make_shared<WorkerEndpoint>(a, options_.channel, options_.breaker);
      LogJson("info", "worker_discovered", {{"worker", a}});
    }
  }
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (!found.count(it->first) && !statics.count(it->first)) {
      LogJson("info", "worker_gone", {{"worker", it->first}});
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
}

void WorkerPool::Poll(WorkerEndpoint& w) {
  grpc::ClientContext hctx;
  hctx.set_deadline(std::chrono::system_clock::now() + options_.check_timeout);
  grpc::health::v1::HealthCheckRequest hreq;
  grpc::health::v1::HealthCheckResponse hresp;
  const grpc::Status hs =
      grpc::health::v1::Health::NewStub(w.check_channel)->Check(&hctx, hreq, &hresp);
  const bool missed = hs.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
  w.missed_checks = missed ? w.missed_checks + 1 : 0;
  // A serving worker whose check timed out fewer than check_misses times in a row stays
  // routable, with the fingerprint and load of its last answered poll; the rest of this poll's
  // calls would likely time out too.
  if (missed && w.serving && w.missed_checks < options_.check_misses) return;
  const bool serving = hs.ok() && hresp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  if (serving != w.serving.load()) {
    LogJson("info", serving ? "worker_serving" : "worker_not_serving", {{"worker", w.address}});
  }
  // Why a worker cannot be checked (refused, a TLS handshake, a wrong name) is logged once per
  // distinct error, not on every poll.
  if (!hs.ok() && hs.error_message() != w.check_error) {
    LogJson("warning", "worker_check_failed",
            {{"worker", w.address}, {"error", hs.error_message()}});
  }
  w.check_error = hs.ok() ? std::string() : hs.error_message();
  w.serving = serving;
  if (!serving) return;
  // The fingerprint is checked on every poll, not only the first: a worker restarted at a known
  // address may serve another model.
  grpc::ClientContext ictx;
  ictx.set_deadline(std::chrono::system_clock::now() + options_.check_timeout);
  v1::ModelInfo info;
  if (!w.check_generator->GetModelInfo(&ictx, {}, &info).ok()) return;
  {
    MutexLock l(&mu_);
    if (fingerprint_.empty()) fingerprint_ = info.contract_fingerprint();
    const bool refused = info.contract_fingerprint() != fingerprint_;
    const bool changed = !w.known || refused != w.refused;
    w.refused = refused;
    w.known = true;
    if (changed && refused) {
      LogJson("error", "worker_refused",
              {{"worker", w.address},
               {"fingerprint", info.contract_fingerprint()},
               {"pool_fingerprint", fingerprint_},
               {"why", "a different model: a mixed fleet never serves"}});
    } else if (changed) {
      LogJson("info", "worker_accepted", {{"worker", w.address}, {"fingerprint", fingerprint_}});
    }
    // The smallest window of the accepted workers: two prompts that one of them could serve
    // from one snapshot always share a key.
    w.affinity_window =
        refused ? 0 : AffinityWindow(info.kv_page_size(), info.prefix_cache_min_tokens());
    int64_t window = 0;
    for (const auto& [address, other] : workers_) {
      const int64_t o = other->affinity_window;
      if (o > 0 && (window == 0 || o < window)) window = o;
    }
    affinity_window_ = window > 0 ? window : kDefaultAffinityWindow;
  }
  grpc::ClientContext lctx;
  lctx.set_deadline(std::chrono::system_clock::now() + options_.check_timeout);
  v1::Load load;
  if (w.check_worker->GetLoad(&lctx, {}, &load).ok()) {
    w.waiting = load.waiting();
    w.running = load.running();
  }
}

void WorkerPool::Loop() {
  mu_.Lock();
  while (!stop_) {
    const bool dns_due = !options_.dns.empty() &&
                         std::chrono::steady_clock::now() - last_dns_ >= options_.dns_interval;
    mu_.Unlock();
    if (dns_due) {
      Resolve();
      last_dns_ = std::chrono::steady_clock::now();
    }
    for (auto& w : All()) Poll(*w);
    mu_.Lock();
    const auto deadline = std::chrono::steady_clock::now() + options_.poll_interval;
    while (!stop_) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= left.zero()) break;
      cv_.WaitWithTimeout(&mu_, absl::FromChrono(left));
    }
  }
  mu_.Unlock();
}

}  // namespace walsh
