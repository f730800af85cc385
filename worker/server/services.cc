#include "worker/server/services.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/error_reactor.h"
#include "common/grpc_status.h"
#include "common/json_log.h"
#include "common/raw_messages.h"
#include "common/stream_writer.h"
#include "worker/model/utf8.h"

namespace walsh {
namespace {

// A request's sink: the scheduler's events as walsh.v1 responses on its stream's StreamWriter
// (common/stream_writer.h). The scheduler may send after the client left: those are dropped.
class StreamSink final : public ResponseSink {
 public:
  explicit StreamSink(std::shared_ptr<StreamWriter> writer) : writer_(std::move(writer)) {}

  void Started(const RequestStarted& started) override {
    v1::GenerateResponse response;
    v1::Started* s = response.mutable_started();
    s->set_request_id(started.request_id);
    s->set_prompt_tokens(static_cast<uint32_t>(started.prompt_tokens));
    s->set_seed(started.seed);
    for (int32_t id : started.prompt_ids) s->add_prompt_ids(id);
    writer_->Push(response);
  }

  void Token(const GeneratedToken& t) override {
    v1::GenerateResponse response;
    v1::Tokens* tokens = response.mutable_tokens();
    v1::Token* token = tokens->add_tokens();
    token->set_id(t.id);
    token->set_index(static_cast<uint64_t>(t.index));
    token->set_logprob(t.logprob);
    for (const auto& [id, logprob] : t.top_logprobs) {
      v1::TokenLogprob* top = token->add_top_logprobs();
      top->set_id(id);
      top->set_logprob(logprob);
    }
    tokens->set_text(t.text);
    writer_->Push(response);
  }

  void Finished(const RequestFinished& finished) override {
    v1::GenerateResponse response;
    v1::Finished* f = response.mutable_finished();
    f->set_reason(FinishReasonName(finished.reason));
    f->set_matched_stop(finished.matched_stop);
    f->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(finished.prompt_tokens));
    f->mutable_usage()->set_completion_tokens(static_cast<uint32_t>(finished.completion_tokens));
    f->mutable_timings()->set_queue_seconds(finished.queue_seconds);
    f->mutable_timings()->set_time_to_first_token_seconds(finished.time_to_first_token_seconds);
    f->mutable_timings()->set_total_seconds(finished.total_seconds);
    writer_->Push(response);
    writer_->Complete(absl::OkStatus());
  }

  void Failed(const absl::Status& status) override { writer_->Complete(status); }

  bool HasRoom() override { return writer_->HasRoom(); }

 private:
  std::shared_ptr<StreamWriter> writer_;
};

// Why a unary call cannot be answered now (OK if it can).
grpc::Status Unavailable(const ServiceContext& ctx, bool needs_tokenizer) {
  if (!ctx.ready) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the model is loading");
  if (needs_tokenizer && ctx.tokenizer == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "this model has no tokenizer");
  }
  return grpc::Status::OK;
}

// The request a stream's writer cancels once it exists (set when preparation made it).
struct RequestSlot {
  Mutex mu;
  std::weak_ptr<ActiveRequest> request ABSL_GUARDED_BY(mu);
};

// What a generation needs after its handler returned: copies, never the call's context.
struct Preparation {
  v1::GenerateRequest request;
  std::optional<std::vector<int32_t>> prompt_ids, emitted_ids;
  std::optional<std::chrono::system_clock::time_point> deadline;
};

// Validates (tokenizes, compiles the constraint) and submits, on the prepare pool; every way
// out ends the stream or hands it to the scheduler.
void Prepare(ServiceContext* ctx, const std::shared_ptr<StreamWriter>& writer,
             const std::shared_ptr<RequestSlot>& slot, const Preparation& p) {
  if (writer->cancelled()) return writer->Complete(writer->CancelledStatus());
  const std::vector<int32_t>* prompt_ids = p.prompt_ids ? &*p.prompt_ids : nullptr;
  const std::vector<int32_t>* emitted_ids = p.emitted_ids ? &*p.emitted_ids : nullptr;
  const v1::GenerateRequest& req = p.request;
  const int64_t emitted = emitted_ids != nullptr ? static_cast<int64_t>(emitted_ids->size()) : 0;
  auto valid = ValidateGenerateRequest(req, ctx->limits, prompt_ids, emitted);
  if (!valid.ok()) {
    LogJson("info", "request_refused",
            {{"request_id", req.request_id()}, {"error", std::string(valid.status().message())}});
    return writer->Complete(valid.status());
  }
  for (const auto& [field, ids] :
       {std::pair{"prompt_ids", prompt_ids}, std::pair{"emitted_ids", emitted_ids}}) {
    if (ids == nullptr) continue;
    for (size_t i = 0; i < ids->size(); ++i) {
      if ((*ids)[i] < 0 || (*ids)[i] >= ctx->limits.vocab) {
        return writer->Complete(
            FieldError(absl::StrCat(field, "[", i, "]"),
                       absl::StrCat((*ids)[i], " is outside [0, ", ctx->limits.vocab, ")")));
      }
    }
  }
  auto request = std::make_shared<ActiveRequest>();
  request->request_id = req.request_id().empty()
                            ? absl::StrCat("req-", ctx->next_request.fetch_add(1))
                            : req.request_id();
  request->priority = req.priority();
  request->arrived_at = Clock::now();
  if (p.deadline) request->deadline = *p.deadline;
  request->prompt = valid->generation.prompt;
  if (!valid->images.empty()) {
    auto images = EncodeImages(*ctx->limits.vision, valid->images, valid->image_spans);
    if (!images.ok()) return writer->Complete(images.status());
    request->images = std::make_shared<const PromptImages>(*std::move(images));
  }
  request->seed = valid->seed;
  request->speculative_tokens = valid->speculative_tokens;
  request->return_prompt_ids = req.return_prompt_ids();
  valid->generation.cancelled = &request->cancelled;  // stops a mask computing for it
  request->generation = std::make_unique<Generation>(ctx->tokenizer, valid->generation);
  if (emitted_ids != nullptr) {
    if (absl::Status replayed = request->generation->Replay(*emitted_ids); !replayed.ok()) {
      return writer->Complete(replayed);
    }
    request->replayed = emitted;
  }
  request->sink = std::make_shared<StreamSink>(writer);
  {
    MutexLock l(&slot->mu);
    slot->request = request;
  }
  // Cancelled before the slot was set: the hook found no request, so the stream ends here.
  if (writer->cancelled()) return writer->Complete(writer->CancelledStatus());
  LogJson("info", "request_start",
          {{"request_id", request->request_id},
           {"prompt_tokens", request->prompt.size()},
           {"resume_at", emitted}});
  const absl::Status submitted = ctx->scheduler->Submit(request);
  if (!submitted.ok()) writer->Complete(submitted);
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartGeneration(
    ServiceContext* ctx, grpc::CallbackServerContext* context, const v1::GenerateRequest& req,
    const std::vector<int32_t>* prompt_ids, const std::vector<int32_t>* emitted_ids) {
  if (!ctx->ready) {
    return new ErrorReactor(absl::UnavailableError("the model is loading"));
  }
  Preparation p{req, {}, {}, {}};
  if (prompt_ids != nullptr) p.prompt_ids = *prompt_ids;
  if (emitted_ids != nullptr) p.emitted_ids = *emitted_ids;
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    if (deadline <= std::chrono::system_clock::now()) {
      return new ErrorReactor(
          absl::DeadlineExceededError("the deadline passed before the request was admitted"));
    }
    p.deadline = deadline;
  }
  // The writer reaches the request only weakly: the request owns the writer through its sink.
  auto slot = std::make_shared<RequestSlot>();
  Scheduler* scheduler = ctx->scheduler;
  if (BufferBudget* budget = ctx->stream_buffers.budget; budget != nullptr) {
    if (const absl::Status b = budget->AdmitStream(); !b.ok()) return new ErrorReactor(b);
  }
  auto writer = StreamWriter::Create(
      context, ctx->stream_buffers,
      [slot, scheduler, stalled_streams = ctx->stalled_streams](bool stalled) {
        std::shared_ptr<ActiveRequest> r;
        {
          MutexLock l(&slot->mu);
          r = slot->request.lock();
        }
        if (stalled && stalled_streams != nullptr) stalled_streams->Inc();
        if (r == nullptr) return;  // still being prepared: Prepare sees the cancellation
        r->cancelled = true;
        if (stalled) LogJson("warning", "client_not_reading", {{"request_id", r->request_id}});
        scheduler->Wake();
      },
      // A stream that was full has room again: the scheduler decodes it at its next step.
      [scheduler] { scheduler->Wake(); });
  PreparePool* pool =
      ctx->prepare_images != nullptr && CarriesImages(req) ? ctx->prepare_images : ctx->prepare;
  if (pool == nullptr) {
    Prepare(ctx, writer, slot, p);
  } else if (!pool->TrySubmit([ctx, writer, slot, p = std::move(p)](bool shutting_down) {
               if (shutting_down) {
                 return writer->Complete(absl::UnavailableError("the worker is shutting down"));
               }
               Prepare(ctx, writer, slot, p);
             })) {
    writer->Complete(pool->Refusal());
  }
  return writer.get();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GeneratorService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  v1::GenerateRequest request;
  if (absl::Status s = ParseRequest(*raw, &request); !s.ok()) return new ErrorReactor(s);
  return StartGeneration(ctx_, context, request, nullptr, nullptr);
}

grpc::ServerUnaryReactor* GeneratorService::Tokenize(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* raw,
                                                     grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* r = context->DefaultReactor();
  v1::TokenizeRequest request;
  if (absl::Status s = ParseRequest(*raw, &request); !s.ok()) {
    r->Finish(ToGrpcStatus(s));
    return r;
  }
  if (const grpc::Status s = Unavailable(*ctx_, /*needs_tokenizer=*/true); !s.ok()) {
    r->Finish(s);
    return r;
  }
  auto tokenize = [ctx = ctx_, r, raw_response,
                   text = std::move(*request.mutable_text())](bool shutting_down) {
    if (shutting_down) {
      return r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker is shutting down"));
    }
    v1::TokenizeResponse response;
    for (int32_t id : ctx->tokenizer->Encode(text)) response.add_ids(id);
    *raw_response = SerializeToByteBuffer(response);
    r->Finish(grpc::Status::OK);
  };
  if (ctx_->prepare == nullptr) {
    tokenize(false);
  } else if (!ctx_->prepare->TrySubmit(std::move(tokenize))) {
    r->Finish(ToGrpcStatus(ctx_->prepare->Refusal()));
  }
  return r;
}

grpc::ServerUnaryReactor* GeneratorService::Detokenize(grpc::CallbackServerContext* context,
                                                       const v1::DetokenizeRequest* request,
                                                       v1::DetokenizeResponse* response) {
  grpc::ServerUnaryReactor* r = context->DefaultReactor();
  if (const grpc::Status s = Unavailable(*ctx_, /*needs_tokenizer=*/true); !s.ok()) {
    r->Finish(s);
    return r;
  }
  std::vector<int32_t> ids;
  for (int i = 0; i < request->ids_size(); ++i) {
    if (request->ids(i) < 0 || request->ids(i) >= ctx_->limits.vocab) {
      r->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             absl::StrCat("ids[", i, "]: ", request->ids(i), " is outside [0, ",
                                          ctx_->limits.vocab, ")")));
      return r;
    }
    ids.push_back(request->ids(i));
  }
  // A proto3 string must be UTF-8: byte tokens alone are not, so they read as U+FFFD, as in
  // Generate's text.
  response->set_text(SanitizeUtf8(ctx_->tokenizer->Decode(ids)));
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* GeneratorService::GetModelInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetModelInfoRequest*,
                                                         v1::ModelInfo* response) {
  grpc::ServerUnaryReactor* r = context->DefaultReactor();
  if (const grpc::Status s = Unavailable(*ctx_, /*needs_tokenizer=*/false); !s.ok()) {
    r->Finish(s);
    return r;
  }
  *response = ctx_->model_info;
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* WorkerService::GetLoad(grpc::CallbackServerContext* context,
                                                 const v1::GetLoadRequest*, v1::Load* response) {
  if (const grpc::Status s = Unavailable(*ctx_, /*needs_tokenizer=*/false); !s.ok()) {
    grpc::ServerUnaryReactor* r = context->DefaultReactor();
    r->Finish(s);
    return r;
  }
  const SchedulerLoad load = ctx_->scheduler->Load();
  response->set_running(static_cast<uint32_t>(load.running));
  response->set_waiting(static_cast<uint32_t>(load.waiting));
  response->set_kv_pages_used(static_cast<uint32_t>(load.engine.kv_pages_used));
  response->set_kv_pages_total(static_cast<uint32_t>(load.engine.kv_pages_total));
  response->set_state_slots_used(static_cast<uint32_t>(load.engine.state_slots_used));
  response->set_state_slots_total(static_cast<uint32_t>(load.engine.state_slots_total));
  response->set_tokens_per_second(load.tokens_per_second);
  grpc::ServerUnaryReactor* r = context->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* WorkerService::Resume(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  v1::ResumeRequest resume;
  if (absl::Status s = ParseRequest(*raw, &resume); !s.ok()) return new ErrorReactor(s);
  const v1::ResumeRequest* request = &resume;
  if (request->prompt_ids().empty()) {  // as strict as Generate: a resume names its prompt
    return new ErrorReactor(FieldError(
        "prompt_ids", "Resume needs the prompt's token ids (from Started with return_prompt_ids)"));
  }
  const std::vector<int32_t> prompt(request->prompt_ids().begin(), request->prompt_ids().end());
  const std::vector<int32_t> emitted(request->emitted_ids().begin(), request->emitted_ids().end());
  return StartGeneration(ctx_, context, request->request(), &prompt, &emitted);
}

}  // namespace walsh
