#include "gateway/gateway_service.h"

#include <deque>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/json_log.h"
#include "common/raw_messages.h"
#include "common/stream_writer.h"

namespace walsh {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

const char* CodeName(grpc::StatusCode c) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const int i = static_cast<int>(c);
  return i >= 0 && i <= 16 ? kNames[i] : "UNKNOWN";
}

// The client's fault (or choice): never counted against a worker, never retried.
bool IsClientError(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::UNIMPLEMENTED:
      return true;
    default:
      return false;
  }
}

uint64_t PrefixHash(const v1::GenerateRequest& r) {
  std::string key;
  if (r.has_tokens()) {
    for (int i = 0; i < r.tokens().ids_size() && i < 64; ++i)
      absl::StrAppend(&key, r.tokens().ids(i), ",");
  } else if (r.has_chat()) {
    for (const auto& m : r.chat().messages())
      absl::StrAppend(&key, m.role(), ":", m.content(), "\n");
  } else {
    key = r.text();
  }
  key.resize(std::min<size_t>(key.size(), 256));
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Unary calls forwarded to a worker with the async stub; the reactor finishes when it answers.
template <typename Resp>
struct UnaryForward {
  grpc::ClientContext ctx;
  Resp resp;
};

}  // namespace

// A proxied client stream: its StreamWriter (common/stream_writer.h), and the upstream call to
// cancel when the client goes away or stops reading.
class GatewayService::ClientStream {
 public:
  std::shared_ptr<StreamWriter> writer;

  // The upstream call in flight (null: none).
  void SetUpstream(grpc::ClientContext* upstream) {
    std::lock_guard<std::mutex> l(mu_);
    upstream_ = upstream;
    if (cancelled_ && upstream_ != nullptr) upstream_->TryCancel();
  }
  void CancelUpstream() {
    std::lock_guard<std::mutex> l(mu_);
    cancelled_ = true;
    if (upstream_ != nullptr) upstream_->TryCancel();
  }

 private:
  std::mutex mu_;
  grpc::ClientContext* upstream_ = nullptr;
  bool cancelled_ = false;
};

namespace {

class ErrorReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit ErrorReactor(const grpc::Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};

}  // namespace

GatewayService::GatewayService(WorkerPool* pool, RoutingPolicy* policy, GatewayMetrics* metrics,
                               GatewayOptions options)
    : pool_(pool),
      policy_(policy),
      fallback_(*MakeRoutingPolicy("least-outstanding")),
      metrics_(metrics),
      options_(std::move(options)) {}

GatewayService::~GatewayService() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return threads_.load() == 0; });
}

grpc::Status GatewayService::Admit(grpc::CallbackServerContext* context,
                                   std::shared_ptr<void>* stream_slot) {
  grpc::Status s = Authorize(context);
  if (s.ok() && options_.limiter != nullptr) {
    const std::string key =
        KeyLimiter::KeyOf(*context, options_.api_keys != nullptr && options_.api_keys->enabled());
    s = stream_slot != nullptr ? options_.limiter->AdmitStream(key, stream_slot)
                               : options_.limiter->AdmitCall(key);
    if (!s.ok()) metrics_->requests.counter({"RESOURCE_EXHAUSTED"}).Inc();
  }
  return s;
}

grpc::Status GatewayService::Authorize(grpc::CallbackServerContext* context) const {
  if (options_.api_keys == nullptr) return grpc::Status::OK;
  grpc::Status s = options_.api_keys->Check(*context);
  if (!s.ok()) metrics_->requests.counter({"UNAUTHENTICATED"}).Inc();
  return s;
}

std::shared_ptr<WorkerEndpoint> GatewayService::PickAny() {
  auto c = pool_->Candidates();
  if (c.empty()) return nullptr;
  return fallback_->Pick(c, {});
}

void GatewayService::CancelAll() { cancel_epoch_++; }

grpc::ServerWriteReactor<grpc::ByteBuffer>* GatewayService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  std::shared_ptr<void> client_slot;
  if (grpc::Status admit = Admit(context, &client_slot); !admit.ok()) {
    return new ErrorReactor(admit);
  }
  v1::GenerateRequest request;
  if (grpc::Status parsed = ParseRequest(*raw, &request); !parsed.ok()) {
    metrics_->requests.counter({"INVALID_ARGUMENT"}).Inc();
    return new ErrorReactor(parsed);
  }
  if (draining_) {
    metrics_->requests.counter({"UNAVAILABLE"}).Inc();
    return new ErrorReactor(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the gateway is draining"));
  }
  if (inflight_.load() >= options_.max_inflight && queued_.load() >= options_.max_queue) {
    metrics_->requests.counter({"RESOURCE_EXHAUSTED"}).Inc();
    return new ErrorReactor(
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                     absl::StrCat("the gateway is full (", options_.max_inflight, " streams and ",
                                  options_.max_queue, " waiting)")));
  }
  auto client = std::make_shared<ClientStream>();
  // The writer reaches the stream only weakly (the stream owns the writer); its end wakes a
  // proxy thread waiting for a slot, so a cancelled queued stream frees its place at once.
  client->writer =
      StreamWriter::Create(context, static_cast<size_t>(options_.max_buffered_responses),
                           [this, weak = std::weak_ptr<ClientStream>(client)](bool) {
                             if (auto c = weak.lock()) c->CancelUpstream();
                             std::lock_guard<std::mutex> l(mu_);
                             cv_.notify_all();
                           });
  std::string session;
  const auto& md = context->client_metadata();
  if (auto it = md.find("x-walsh-session"); it != md.end())
    session.assign(it->second.data(), it->second.size());
  ++threads_;
  ++queued_;
  std::thread(&GatewayService::Proxy, this, client, std::move(request), context->deadline(),
              session, std::move(client_slot))
      .detach();
  return client->writer.get();
}

void GatewayService::Proxy(std::shared_ptr<ClientStream> client, v1::GenerateRequest request,
                           std::chrono::system_clock::time_point deadline, std::string session,
                           std::shared_ptr<void> client_slot) {
  const auto start = Clock::now();
  const uint64_t epoch = cancel_epoch_.load();
  grpc::Status final_status = grpc::Status::OK;
  auto done = [&](const grpc::Status& s) {
    final_status = s;
    // Give back this stream's places before the client sees its end, so its next stream fits.
    client_slot.reset();
    {
      std::lock_guard<std::mutex> l(mu_);
      --inflight_;
      metrics_->inflight.Set(static_cast<double>(inflight_.load()));
    }
    cv_.notify_all();
    client->writer->Complete(s);
  };
  // Admission: wait for a slot (bounded queue).
  {
    std::unique_lock<std::mutex> l(mu_);
    metrics_->queue_depth.Set(static_cast<double>(queued_.load()));
    cv_.wait(
        l, [&] { return inflight_.load() < options_.max_inflight || client->writer->cancelled(); });
    --queued_;
    ++inflight_;
    metrics_->queue_depth.Set(static_cast<double>(queued_.load()));
    metrics_->inflight.Set(static_cast<double>(inflight_.load()));
  }

  const bool client_wants_prompt = request.return_prompt_ids();
  request.set_return_prompt_ids(true);  // needed to resume elsewhere
  const RouteHint hint{PrefixHash(request), session};
  std::vector<int32_t> prompt_ids, emitted;
  uint64_t seed = 0;
  bool started = false, finished = false;
  int retries = 0, migrations = 0, waits = 0, rounds = 0;
  std::set<std::string> failed;
  grpc::Status last = grpc::Status(grpc::StatusCode::UNAVAILABLE, "no worker available");
  Clock::time_point last_token{};
  std::mt19937_64 gen(std::random_device{}());

  while (!finished) {
    if (client->writer->cancelled() || cancel_epoch_.load() != epoch) {
      done(client->writer->cancelled()
               ? client->writer->CancelledStatus()
               : grpc::Status(grpc::StatusCode::UNAVAILABLE, "the gateway is shutting down"));
      break;
    }
    if (deadline != std::chrono::system_clock::time_point::max() &&
        std::chrono::system_clock::now() >= deadline) {
      done(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded"));
      break;
    }
    std::vector<std::shared_ptr<WorkerEndpoint>> candidates;
    for (auto& w : pool_->Candidates()) {
      if (!failed.count(w->address)) candidates.push_back(w);
    }
    if (candidates.empty() && !failed.empty()) {
      // Every worker failed this request once: try them again after a pause, a few times.
      failed.clear();
      if (++rounds > 5) {
        done(last);
        break;
      }
      std::this_thread::sleep_for(options_.backoff * rounds);
      continue;
    }
    if (candidates.empty()) {
      // No worker can take it now: wait a little for one (a restart, a recovery), bounded.
      if (!pool_->WaitForAny(std::chrono::milliseconds(2000)) || ++waits > 3) {
        done(last);
        break;
      }
      continue;
    }
    std::shared_ptr<WorkerEndpoint> w = policy_->Pick(candidates, hint);
    if (!w) w = fallback_->Pick(candidates, hint);
    if (!w->breaker.Allow()) {  // half-open and its one trial is taken: try another
      failed.insert(w->address);
      continue;
    }

    grpc::ClientContext upstream;
    if (deadline != std::chrono::system_clock::time_point::max()) upstream.set_deadline(deadline);
    client->SetUpstream(&upstream);
    ++w->outstanding;
    metrics_->upstream_attempts.Inc();
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
    if (!started) {
      reader = w->generator->Generate(&upstream, request);
    } else {
      v1::ResumeRequest resume;
      *resume.mutable_request() = request;
      resume.mutable_request()->mutable_sampling()->set_seed(seed);
      for (int32_t id : prompt_ids) resume.add_prompt_ids(id);
      for (int32_t id : emitted) resume.add_emitted_ids(id);
      reader = w->worker->Resume(&upstream, resume);
    }
    v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
      if (resp.has_started()) {
        if (started) continue;  // a resumed stream's Started: the client has its own
        started = true;
        prompt_ids.assign(resp.started().prompt_ids().begin(), resp.started().prompt_ids().end());
        seed = resp.started().seed();
        if (!client_wants_prompt) resp.mutable_started()->clear_prompt_ids();
        const std::pair<std::string, std::string> routed("x-walsh-worker", w->address);
        client->writer->Push(resp, &routed);
        continue;
      }
      if (resp.has_tokens()) {
        const auto now = Clock::now();
        if (emitted.empty()) {
          metrics_->time_to_first_token.Observe(Since(start));
        } else {
          metrics_->inter_token_latency.Observe(
              std::chrono::duration<double>(now - last_token).count());
        }
        last_token = now;
        for (const auto& t : resp.tokens().tokens()) emitted.push_back(t.id());
      }
      if (resp.has_finished()) finished = true;
      client->writer->Push(resp);
    }
    const grpc::Status s = reader->Finish();
    client->SetUpstream(nullptr);
    --w->outstanding;
    if (finished) {
      w->breaker.RecordSuccess();
      done(grpc::Status::OK);
      break;
    }
    if (client->writer->cancelled()) continue;  // handled at the top of the loop
    if (IsClientError(s.error_code()) || s.ok()) {
      w->breaker.RecordSuccess();  // the worker answered; the request was at fault
      done(s.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "the worker ended the stream early")
                  : s);
      break;
    }
    last = s;
    if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED &&
        s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      w->breaker.RecordFailure();
    }
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      done(s);
      break;
    }
    failed.insert(w->address);
    if (!started) {
      if (++retries > options_.max_retries) {
        done(s);
        break;
      }
      metrics_->retries.Inc();
      LogJson("info", "retry",
              {{"request_id", request.request_id()},
               {"worker", w->address},
               {"status", s.error_message()},
               {"attempt", retries}});
      const auto backoff = options_.backoff * (1 << std::min(retries, 6));
      std::this_thread::sleep_for(std::chrono::milliseconds(
          std::uniform_int_distribution<int64_t>(0, backoff.count())(gen)));
    } else {
      if (++migrations > options_.max_migrations) {
        done(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("the stream's workers failed ", migrations,
                                       " times: ", s.error_message())));
        break;
      }
      metrics_->migrations.Inc();
      LogJson("info", "migrate",
              {{"request_id", request.request_id()},
               {"from", w->address},
               {"at_index", emitted.size()},
               {"status", s.error_message()}});
    }
  }

  metrics_->requests.counter({CodeName(final_status.error_code())}).Inc();
  metrics_->e2e_latency.Observe(Since(start));
  {
    std::lock_guard<std::mutex> l(mu_);
    --threads_;
  }
  cv_.notify_all();
}

namespace {

template <typename Req, typename Resp, typename Call>
grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* context, const grpc::Status& auth,
                                  std::shared_ptr<WorkerEndpoint> w, const Req* request,
                                  Resp* response, Call call) {
  grpc::ServerUnaryReactor* r = context->DefaultReactor();
  if (!auth.ok()) {
    r->Finish(auth);
    return r;
  }
  if (!w) {
    r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no worker available"));
    return r;
  }
  auto* upstream = new grpc::ClientContext();
  upstream->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  call(w.get(), upstream, request, response, [r, upstream, w](grpc::Status s) {
    delete upstream;
    r->Finish(s);
  });
  return r;
}

}  // namespace

grpc::ServerUnaryReactor* GatewayService::Tokenize(grpc::CallbackServerContext* context,
                                                   const v1::TokenizeRequest* request,
                                                   v1::TokenizeResponse* response) {
  return Forward(context, Admit(context, nullptr), PickAny(), request, response,
                 [](WorkerEndpoint* w, grpc::ClientContext* c, const v1::TokenizeRequest* q,
                    v1::TokenizeResponse* p, std::function<void(grpc::Status)> cb) {
                   w->generator->async()->Tokenize(c, q, p, std::move(cb));
                 });
}

grpc::ServerUnaryReactor* GatewayService::Detokenize(grpc::CallbackServerContext* context,
                                                     const v1::DetokenizeRequest* request,
                                                     v1::DetokenizeResponse* response) {
  return Forward(context, Admit(context, nullptr), PickAny(), request, response,
                 [](WorkerEndpoint* w, grpc::ClientContext* c, const v1::DetokenizeRequest* q,
                    v1::DetokenizeResponse* p, std::function<void(grpc::Status)> cb) {
                   w->generator->async()->Detokenize(c, q, p, std::move(cb));
                 });
}

grpc::ServerUnaryReactor* GatewayService::GetModelInfo(grpc::CallbackServerContext* context,
                                                       const v1::GetModelInfoRequest* request,
                                                       v1::ModelInfo* response) {
  return Forward(context, Admit(context, nullptr), PickAny(), request, response,
                 [](WorkerEndpoint* w, grpc::ClientContext* c, const v1::GetModelInfoRequest* q,
                    v1::ModelInfo* p, std::function<void(grpc::Status)> cb) {
                   w->generator->async()->GetModelInfo(c, q, p, std::move(cb));
                 });
}

}  // namespace walsh
