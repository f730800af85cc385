#include "gateway/proxied_stream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/json_log.h"
#include "gateway/routing/prefix_key.h"

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

// How often a stream waiting for a routable worker looks again (GatewayOptions::worker_wait).
constexpr auto kWorkerPoll = std::chrono::milliseconds(20);

}  // namespace

// One call to one worker: Generate, or Resume after a migration. It owns itself from Begin to
// OnDone; the stream reaches it (to cancel it) through a shared pointer.
class ProxiedStream::UpstreamCall final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  UpstreamCall(std::shared_ptr<ProxiedStream> stream, std::shared_ptr<WorkerEndpoint> worker)
      : stream_(std::move(stream)), worker_(std::move(worker)) {}

  grpc::ClientContext context;

  void Begin(std::shared_ptr<UpstreamCall> self, v1::GenerateRequest request) {
    self_ = std::move(self);
    generate_ = std::move(request);
    worker_->generator->async()->Generate(&context, &generate_, this);
    AddHold();  // until the last read: a held read resumes later, so OnDone must wait for it
    StartRead(&response_);
    StartCall();
  }
  void Begin(std::shared_ptr<UpstreamCall> self, v1::ResumeRequest request) {
    self_ = std::move(self);
    resume_ = std::move(request);
    worker_->worker->async()->Resume(&context, &resume_, this);
    AddHold();
    StartRead(&response_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return RemoveHold();
    // A worker that answers is serving: a half-open breaker closes on its trial's first
    // response, not when that (maybe long) stream ends.
    if (!answered_) {
      answered_ = true;
      worker_->breaker.RecordAnswer();
    }
    // A full client buffer holds the next read: HTTP/2 flow control then holds the worker.
    if (stream_->OnResponse(response_, worker_->address) || !stream_->HoldReads()) {
      StartRead(&response_);
    }
  }
  // Once per held read: when the client's buffer drains, or the stream is interrupted (the read
  // then fails and the call ends).
  void ResumeReads() { StartRead(&response_); }
  void OnDone(const grpc::Status& s) override {
    std::shared_ptr<UpstreamCall> self = std::move(self_);  // this dies with the last owner
    stream_->OnCallDone(worker_, s);
  }

 private:
  std::shared_ptr<ProxiedStream> stream_;
  std::shared_ptr<WorkerEndpoint> worker_;
  std::shared_ptr<UpstreamCall> self_;
  v1::GenerateRequest generate_;
  v1::ResumeRequest resume_;
  v1::GenerateResponse response_;
  bool answered_ = false;
};

std::shared_ptr<ProxiedStream> ProxiedStream::Create(const Env& env,
                                                     grpc::CallbackServerContext* context,
                                                     v1::GenerateRequest request,
                                                     std::shared_ptr<void> client_slot,
                                                     Hooks hooks) {
  std::string session;
  const auto& md = context->client_metadata();
  if (auto it = md.find("x-walsh-session"); it != md.end())
    session.assign(it->second.data(), it->second.size());
  std::shared_ptr<ProxiedStream> stream(
      new ProxiedStream(env, std::move(request), context->deadline(), std::move(session),
                        std::move(client_slot), std::move(hooks)));
  // The writer reaches the stream only weakly: a stream that has ended owes its client nothing.
  const std::weak_ptr<ProxiedStream> weak = stream;
  stream->writer_ = StreamWriter::Create(
      context, env.options->stream_buffers,
      [weak](bool stalled) {
        auto s = weak.lock();
        if (s == nullptr) return;
        {
          MutexLock l(&s->mu_);
          if (s->ended_) return;  // it owes the gateway nothing more
          s->client_gone_at_ = Clock::now();
        }
        if (stalled) s->env_.metrics->stalled_streams.Inc();
        s->hooks_.client_gone(s.get());
      },
      [weak] {
        if (auto s = weak.lock()) s->OnClientWritable();
      });
  return stream;
}

ProxiedStream::ProxiedStream(const Env& env, v1::GenerateRequest request,
                             std::chrono::system_clock::time_point deadline, std::string session,
                             std::shared_ptr<void> client_slot, Hooks hooks)
    : env_(env),
      request_(std::move(request)),
      deadline_(deadline),
      session_(std::move(session)),
      client_slot_(std::move(client_slot)),
      hooks_(std::move(hooks)) {
  client_wants_prompt_ = request_.return_prompt_ids();
  request_.set_return_prompt_ids(true);  // needed to resume elsewhere
  hint_ = RouteHint{PrefixAffinityKey(request_, env_.pool->affinity_window()), session_};
}

bool ProxiedStream::HoldReads() {
  MutexLock l(&mu_);
  if (interrupted_) return false;  // read on: the cancelled call's read fails and the call ends
  if (writable_owed_) {            // the client's buffer drained between the push and now
    writable_owed_ = false;
    return false;
  }
  reads_held_ = true;
  return true;
}

void ProxiedStream::OnClientWritable() {
  std::shared_ptr<UpstreamCall> call;
  {
    MutexLock l(&mu_);
    if (!reads_held_) {
      writable_owed_ = true;
      return;
    }
    reads_held_ = false;
    call = call_;
  }
  if (call != nullptr) call->ResumeReads();
}

void ProxiedStream::Interrupt(const grpc::Status& why) {
  std::shared_ptr<UpstreamCall> call;
  std::shared_ptr<grpc::Alarm> alarm;
  bool held;
  {
    MutexLock l(&mu_);
    if (!interrupted_) interrupted_ = why;
    call = call_;
    alarm = alarm_;
    held = reads_held_;
    reads_held_ = false;
  }
  // Outside the lock: either may run the pending callback on this thread.
  if (call != nullptr) call->context.TryCancel();
  if (held && call != nullptr) call->ResumeReads();
  if (alarm != nullptr) alarm->Cancel();
}

std::optional<grpc::Status> ProxiedStream::Interruption() {
  {
    MutexLock l(&mu_);
    if (interrupted_) return interrupted_;
  }
  if (writer_->cancelled()) return ToGrpcStatus(writer_->CancelledStatus());
  return std::nullopt;
}

void ProxiedStream::Step() {
  for (;;) {
    if (std::optional<grpc::Status> why = Interruption()) return End(*why);
    if (deadline_ != std::chrono::system_clock::time_point::max() &&
        std::chrono::system_clock::now() >= deadline_) {
      return End(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded"));
    }
    std::vector<std::shared_ptr<WorkerEndpoint>> routable = env_.pool->Candidates();
    if (!routable.empty()) waiting_for_worker_ = false;  // a later empty pool waits afresh
    std::vector<std::shared_ptr<WorkerEndpoint>> candidates;
    for (auto& w : routable) {
      if (!failed_.count(w->address)) candidates.push_back(w);
    }
    if (candidates.empty() && !failed_.empty()) {
      // Every worker failed this request once: try them again after a pause, a few times.
      failed_.clear();
      if (++rounds_ > env_.options->retry_rounds) return End(last_);
      return Sleep(env_.options->backoff * rounds_);
    }
    if (candidates.empty()) {
      // No worker can take it now: wait a little for one (a restart, a recovery), bounded.
      if (!waiting_for_worker_) {
        if (++waits_ > env_.options->max_worker_waits) return End(last_);
        waiting_for_worker_ = true;
        wait_until_ = Clock::now() + env_.options->worker_wait;
      }
      if (Clock::now() >= wait_until_) return End(last_);
      return Sleep(kWorkerPoll);
    }
    std::shared_ptr<WorkerEndpoint> w = env_.policy->Pick(candidates, hint_);
    if (!w) w = env_.fallback->Pick(candidates, hint_);
    if (!w->breaker.Allow()) {  // half-open and its one trial is taken: try another
      failed_.insert(w->address);
      continue;
    }
    return StartCall(std::move(w));
  }
}

void ProxiedStream::StartCall(std::shared_ptr<WorkerEndpoint> w) {
  ++w->outstanding;
  env_.metrics->upstream_attempts.Inc();
  auto call = std::make_shared<UpstreamCall>(shared_from_this(), w);
  if (deadline_ != std::chrono::system_clock::time_point::max()) {
    call->context.set_deadline(deadline_);
  }
  {
    MutexLock l(&mu_);
    call_ = call;
  }
  if (!started_) {
    call->Begin(call, request_);
  } else {
    v1::ResumeRequest resume;
    *resume.mutable_request() = request_;
    resume.mutable_request()->mutable_sampling()->set_seed(seed_);
    for (int32_t id : prompt_ids_) resume.add_prompt_ids(id);
    for (int32_t id : emitted_) resume.add_emitted_ids(id);
    call->Begin(call, std::move(resume));
  }
  bool interrupted;
  {
    MutexLock l(&mu_);
    interrupted = interrupted_.has_value();
  }
  if (interrupted) call->context.TryCancel();  // Interrupt may have come before Begin
}

bool ProxiedStream::OnResponse(v1::GenerateResponse& resp, const std::string& worker) {
  if (resp.has_started()) {
    if (started_) return true;  // a resumed stream's Started: the client has its own
    started_ = true;
    prompt_ids_.assign(resp.started().prompt_ids().begin(), resp.started().prompt_ids().end());
    seed_ = resp.started().seed();
    if (!client_wants_prompt_) resp.mutable_started()->clear_prompt_ids();
    const std::pair<std::string, std::string> routed("x-walsh-worker", worker);
    return writer_->Push(resp, &routed);
  }
  if (resp.has_tokens()) {
    const auto now = Clock::now();
    if (emitted_.empty()) {
      env_.metrics->time_to_first_token.Observe(Since(start_));
    } else {
      env_.metrics->inter_token_latency.Observe(
          std::chrono::duration<double>(now - last_token_).count());
    }
    last_token_ = now;
    for (const auto& t : resp.tokens().tokens()) emitted_.push_back(t.id());
  }
  if (resp.has_finished()) finished_ = true;
  return writer_->Push(resp);
}

void ProxiedStream::OnCallDone(const std::shared_ptr<WorkerEndpoint>& w, const grpc::Status& s) {
  {
    MutexLock l(&mu_);
    call_.reset();
  }
  --w->outstanding;
  if (finished_) {
    w->breaker.RecordSuccess();
    return End(grpc::Status::OK);
  }
  if (Interruption()) {
    w->breaker.ReleaseTrial();
    return Step();  // which ends it
  }
  // A final status (common/final_status.h) is the request's doing too: another worker would
  // fail it the same way.
  if (IsClientError(s.error_code()) || s.ok() || IsFinalGrpcStatus(s)) {
    w->breaker.RecordSuccess();  // the worker answered; the request was at fault
    return End(
        s.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "the worker ended the stream early") : s);
  }
  last_ = s;
  if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    w->breaker.ReleaseTrial();
  } else {
    w->breaker.RecordFailure();
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return End(s);
  failed_.insert(w->address);
  if (!started_) {
    if (++retries_ > env_.options->max_retries) return End(s);
    env_.metrics->retries.Inc();
    LogJson("info", "retry",
            {{"request_id", request_.request_id()},
             {"worker", w->address},
             {"status", s.error_message()},
             {"attempt", retries_}});
    const auto backoff = env_.options->backoff * (1 << std::min(retries_, 6));
    return Sleep(std::chrono::milliseconds(
        std::uniform_int_distribution<int64_t>(0, backoff.count())(rng_)));
  }
  if (++migrations_ > env_.options->max_migrations) {
    return End(grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("the stream's workers failed ", migrations_, " times: ", s.error_message())));
  }
  env_.metrics->migrations.Inc();
  LogJson("info", "migrate",
          {{"request_id", request_.request_id()},
           {"from", w->address},
           {"at_index", emitted_.size()},
           {"status", s.error_message()}});
  Step();
}

void ProxiedStream::Sleep(Clock::duration d) {
  auto until = std::chrono::system_clock::now() +
               std::chrono::duration_cast<std::chrono::system_clock::duration>(d);
  until = std::min(until, deadline_);
  auto alarm = std::make_shared<grpc::Alarm>();
  {
    MutexLock l(&mu_);
    alarm_ = alarm;
  }
  alarm->Set(until, [self = shared_from_this()](bool) {
    {
      MutexLock l(&self->mu_);
      self->alarm_.reset();
    }
    self->Step();
  });
  bool interrupted;
  {
    MutexLock l(&mu_);
    interrupted = interrupted_.has_value();
  }
  if (interrupted) alarm->Cancel();  // Interrupt may have come before Set
}

void ProxiedStream::End(const grpc::Status& s) {
  std::shared_ptr<ProxiedStream> self = shared_from_this();  // the gateway may drop its own
  std::optional<Clock::time_point> gone_at;
  {
    MutexLock l(&mu_);
    if (ended_) return;
    ended_ = true;
    gone_at = client_gone_at_;
  }
  env_.metrics->requests.counter({CodeName(s.error_code())}).Inc();
  env_.metrics->e2e_latency.Observe(Since(start_));
  if (gone_at) env_.metrics->cancel_to_free.Observe(Since(*gone_at));
  // Give back this stream's places before the client sees its end, so its next stream fits.
  client_slot_.reset();
  hooks_.ended(this);
  writer_->Complete(FromGrpcStatus(s));
}

}  // namespace walsh
