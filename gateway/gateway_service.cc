#include "gateway/gateway_service.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/error_reactor.h"
#include "common/grpc_status.h"
#include "common/raw_messages.h"
#include "gateway/client_key.h"

namespace walsh {

GatewayService::GatewayService(WorkerPool* pool, RoutingPolicy* policy, GatewayMetrics* metrics,
                               GatewayOptions options)
    : pool_(pool),
      fallback_(*MakeRoutingPolicy("least-outstanding")),
      metrics_(metrics),
      options_(std::move(options)),
      env_{pool, policy, fallback_.get(), metrics, &options_} {}

GatewayService::~GatewayService() {
  MutexLock l(&mu_);
  while (!live_.empty()) all_ended_.Wait(&mu_);
}

int64_t GatewayService::inflight() {
  MutexLock l(&mu_);
  return inflight_ + static_cast<int64_t>(waiting_.size());
}

absl::Status GatewayService::Admit(grpc::CallbackServerContext* context,
                                   std::shared_ptr<void>* stream_slot, bool rate) {
  absl::Status s = Authorize(context);
  if (s.ok() && options_.limiter != nullptr && rate) {
    const std::string key =
        ClientKeyOf(*context, options_.api_keys != nullptr && options_.api_keys->enabled(),
                    options_.trusted_proxies, options_.ipv6_prefix_bits);
    s = stream_slot != nullptr ? options_.limiter->AdmitStream(key, stream_slot)
                               : options_.limiter->AdmitCall(key);
    if (!s.ok()) metrics_->requests.counter({"RESOURCE_EXHAUSTED"}).Inc();
  }
  return s;
}

absl::Status GatewayService::Authorize(grpc::CallbackServerContext* context) const {
  if (options_.api_keys == nullptr) return absl::OkStatus();
  absl::Status s = options_.api_keys->Check(MetadataValues(*context, "authorization"));
  if (!s.ok()) metrics_->requests.counter({"UNAUTHENTICATED"}).Inc();
  return s;
}

std::shared_ptr<WorkerEndpoint> GatewayService::PickAny() {
  auto c = pool_->Candidates();
  if (c.empty()) return nullptr;
  return fallback_->Pick(c, {});
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GatewayService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  std::shared_ptr<void> client_slot;
  if (absl::Status admit = Admit(context, &client_slot); !admit.ok()) {
    return new ErrorReactor(admit);
  }
  v1::GenerateRequest request;
  if (absl::Status parsed = ParseRequest(*raw, &request); !parsed.ok()) {
    metrics_->requests.counter({"INVALID_ARGUMENT"}).Inc();
    return new ErrorReactor(parsed);
  }
  if (draining_) {
    metrics_->requests.counter({"UNAVAILABLE"}).Inc();
    return new ErrorReactor(absl::UnavailableError("the gateway is draining"));
  }
  if (BufferBudget* budget = options_.stream_buffers.budget; budget != nullptr) {
    if (const absl::Status b = budget->AdmitStream(); !b.ok()) {
      metrics_->requests.counter({"RESOURCE_EXHAUSTED"}).Inc();
      return new ErrorReactor(b);
    }
  }
  ProxiedStream::Hooks hooks{[this](ProxiedStream* s) { OnClientGone(s); },
                             [this](ProxiedStream* s) { OnEnded(s); }};
  std::shared_ptr<ProxiedStream> stream = ProxiedStream::Create(
      env_, context, std::move(request), std::move(client_slot), std::move(hooks));
  bool full = false, start_now = false;
  {
    MutexLock l(&mu_);
    if (inflight_ >= options_.max_inflight &&
        static_cast<int64_t>(waiting_.size()) >= options_.max_queue) {
      full = true;
    } else {
      start_now = inflight_ < options_.max_inflight;
      live_.emplace(stream.get(), Entry{stream, start_now});
      if (start_now) {
        ++inflight_;
      } else {
        waiting_.push_back(stream.get());
      }
      UpdateGaugesLocked();
    }
  }
  if (full) {
    stream->EndUnstarted(
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                     absl::StrCat("the gateway is full (", options_.max_inflight, " streams and ",
                                  options_.max_queue, " waiting)")));
  } else if (start_now) {
    stream->Start();
  }
  return stream->reactor();
}

void GatewayService::OnClientGone(ProxiedStream* stream) {
  std::shared_ptr<ProxiedStream> s;
  bool queued = false;
  {
    MutexLock l(&mu_);
    auto it = live_.find(stream);
    if (it == live_.end()) return;
    s = it->second.stream;
    if (!it->second.admitted) {
      queued = true;
      if (auto w = std::find(waiting_.begin(), waiting_.end(), stream); w != waiting_.end()) {
        waiting_.erase(w);
      }
    }
  }
  // A queued stream frees its place at once; a running one once its upstream call returns.
  if (queued) {
    s->EndUnstarted(s->ClientGoneStatus());
  } else {
    s->Interrupt(s->ClientGoneStatus());
  }
}

void GatewayService::OnEnded(ProxiedStream* stream) {
  std::vector<std::shared_ptr<ProxiedStream>> admitted;
  {
    MutexLock l(&mu_);
    auto it = live_.find(stream);
    if (it == live_.end()) return;  // refused before it was registered
    if (it->second.admitted) {
      --inflight_;
    } else if (auto w = std::find(waiting_.begin(), waiting_.end(), stream); w != waiting_.end()) {
      waiting_.erase(w);
    }
    live_.erase(it);
    while (inflight_ < options_.max_inflight && !waiting_.empty()) {
      Entry& next = live_.at(waiting_.front());
      waiting_.pop_front();
      next.admitted = true;
      ++inflight_;
      admitted.push_back(next.stream);
    }
    UpdateGaugesLocked();
    if (live_.empty()) all_ended_.SignalAll();
  }
  for (auto& s : admitted) s->Start();
}

void GatewayService::UpdateGaugesLocked() {
  metrics_->inflight.Set(static_cast<double>(inflight_));
  metrics_->queue_depth.Set(static_cast<double>(waiting_.size()));
}

void GatewayService::CancelAll() {
  std::vector<std::shared_ptr<ProxiedStream>> running, queued;
  {
    MutexLock l(&mu_);
    for (auto& [ptr, e] : live_) (e.admitted ? running : queued).push_back(e.stream);
    waiting_.clear();
  }
  const grpc::Status why(grpc::StatusCode::UNAVAILABLE, "the gateway is shutting down");
  for (auto& s : queued) s->EndUnstarted(why);
  for (auto& s : running) s->Interrupt(why);
}

namespace {

template <typename Req, typename Resp, typename Call>
grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* context, const absl::Status& auth,
                                  std::chrono::milliseconds timeout,
                                  std::shared_ptr<WorkerEndpoint> w, const Req* request,
                                  Resp* response, Call call) {
  grpc::ServerUnaryReactor* r = context->DefaultReactor();
  if (!auth.ok()) {
    r->Finish(ToGrpcStatus(auth));
    return r;
  }
  if (!w) {
    r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no worker available"));
    return r;
  }
  auto* upstream = new grpc::ClientContext();
  upstream->set_deadline(std::chrono::system_clock::now() + timeout);
  call(w.get(), upstream, request, response, [r, upstream, w](grpc::Status s) {
    delete upstream;
    r->Finish(s);
  });
  return r;
}

}  // namespace

grpc::ServerUnaryReactor* GatewayService::Tokenize(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* raw_response) {
  auto messages = std::make_shared<std::pair<v1::TokenizeRequest, v1::TokenizeResponse>>();
  absl::Status admitted = Admit(context, nullptr);
  if (admitted.ok()) admitted = ParseRequest(*raw, &messages->first);
  return Forward(context, admitted, options_.unary_timeout, PickAny(), &messages->first,
                 &messages->second,
                 [messages, raw_response](WorkerEndpoint* w, grpc::ClientContext* c,
                                          const v1::TokenizeRequest* q, v1::TokenizeResponse* p,
                                          std::function<void(grpc::Status)> cb) {
                   w->generator->async()->Tokenize(
                       c, q, p, [messages, raw_response, cb = std::move(cb)](grpc::Status s) {
                         if (s.ok()) *raw_response = SerializeToByteBuffer(messages->second);
                         cb(s);
                       });
                 });
}

grpc::ServerUnaryReactor* GatewayService::Detokenize(grpc::CallbackServerContext* context,
                                                     const v1::DetokenizeRequest* request,
                                                     v1::DetokenizeResponse* response) {
  return Forward(context, Admit(context, nullptr), options_.unary_timeout, PickAny(), request,
                 response,
                 [](WorkerEndpoint* w, grpc::ClientContext* c, const v1::DetokenizeRequest* q,
                    v1::DetokenizeResponse* p, std::function<void(grpc::Status)> cb) {
                   w->generator->async()->Detokenize(c, q, p, std::move(cb));
                 });
}

grpc::ServerUnaryReactor* GatewayService::GetModelInfo(grpc::CallbackServerContext* context,
                                                       const v1::GetModelInfoRequest* request,
                                                       v1::ModelInfo* response) {
  return Forward(context, Admit(context, nullptr, /*rate=*/false), options_.unary_timeout,
                 PickAny(), request, response,
                 [](WorkerEndpoint* w, grpc::ClientContext* c, const v1::GetModelInfoRequest* q,
                    v1::ModelInfo* p, std::function<void(grpc::Status)> cb) {
                   w->generator->async()->GetModelInfo(c, q, p, std::move(cb));
                 });
}

}  // namespace walsh
