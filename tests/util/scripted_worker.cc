#include "tests/util/scripted_worker.h"

#include "grpcpp/alarm.h"
#include "grpcpp/health_check_service_interface.h"

namespace walsh::testing {

int32_t ScriptedToken(uint64_t seed, uint64_t index) {
  return static_cast<int32_t>((seed * 7919 + index * 104729) % 50000);
}

// One scripted stream: Started, then one message per token from `from` up to max_tokens, then
// Finished ("length"); or, at `fail_after` tokens, UNAVAILABLE. One write at a time. Finish is
// called with mu_ released and nothing of the stream touched after it: OnDone may run on
// another thread at once and delete the stream.
class ScriptedWorker::Stream final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  Stream(Counts* counts, uint64_t seed, uint64_t from, uint64_t max_tokens, int fail_after,
         const Script& script)
      : counts_(counts),
        seed_(seed),
        next_(from),
        max_tokens_(max_tokens),
        fail_after_(fail_after),
        interval_(script.token_interval),
        padding_(script.text_bytes, 'x') {
    ++counts_->open;
    v1::Started* s = response_.mutable_started();
    s->set_request_id("scripted");
    s->set_prompt_tokens(static_cast<uint32_t>(kScriptedPromptIds.size()));
    for (int32_t id : kScriptedPromptIds) s->add_prompt_ids(id);
    s->set_seed(seed_);
    {
      MutexLock l(&mu_);
      writing_ = true;
    }
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    bool end = false, pace = false;
    {
      MutexLock l(&mu_);
      writing_ = false;
      end = !ok || cancelled_;
      if (end && !MarkFinished()) return;
      pace = !end && interval_.count() > 0 && sent_tokens_ > 0;
      pacing_ = pace;
    }
    if (end) return Finish(grpc::Status::CANCELLED);
    if (!pace) return Next();
    // The pace ends inside Next's one locked section: a cancel between the two would see
    // nothing in flight, finish, and let OnDone free the stream under the alarm's feet.
    alarm_.Set(std::chrono::system_clock::now() + interval_, [this](bool) { Next(true); });
  }
  // A write or the pace's alarm in flight finishes the stream when it returns: the stream (and
  // its alarm) must outlive both.
  void OnCancel() override {
    {
      MutexLock l(&mu_);
      cancelled_ = true;
      if (writing_ || pacing_ || !MarkFinished()) return;
    }
    Finish(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    --counts_->open;
    delete this;
  }

 private:
  // Under mu_: true for the one caller that is to finish the stream.
  bool MarkFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return false;
    finished_ = true;
    return true;
  }

  // The next message, or the end; `paced` when the pace's alarm calls.
  void Next(bool paced = false) {
    grpc::Status end;
    bool write = false;
    {
      MutexLock l(&mu_);
      if (paced) pacing_ = false;
      if (finished_) return;
      if (cancelled_) {
        end = grpc::Status::CANCELLED;
      } else if (sent_finished_) {
        end = grpc::Status::OK;
      } else if (fail_after_ >= 0 && sent_tokens_ == fail_after_) {
        end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "scripted failure");
      } else {
        Compose();
        writing_ = write = true;
      }
      if (!write) MarkFinished();  // finished_ was false: this caller ends the stream
    }
    if (write) return StartWrite(&response_);
    Finish(end);
  }

  void Compose() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    response_.Clear();
    if (next_ >= max_tokens_) {
      v1::Finished* f = response_.mutable_finished();
      f->set_reason("length");
      f->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(kScriptedPromptIds.size()));
      f->mutable_usage()->set_completion_tokens(static_cast<uint32_t>(next_));
      sent_finished_ = true;
      return;
    }
    v1::Token* t = response_.mutable_tokens()->add_tokens();
    t->set_id(ScriptedToken(seed_, next_));
    t->set_index(next_);
    response_.mutable_tokens()->set_text(padding_);
    ++next_;
    ++sent_tokens_;
    ++counts_->tokens_written;
  }

  Counts* const counts_;
  const uint64_t seed_;
  uint64_t next_;
  const uint64_t max_tokens_;
  const int fail_after_;
  const std::chrono::milliseconds interval_;
  const std::string padding_;
  int sent_tokens_ = 0;  // by this stream (a resumed one starts at 0)
  grpc::Alarm alarm_;
  v1::GenerateResponse response_;
  Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool pacing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool sent_finished_ = false;
};

namespace {

// Holds a stream open, writing nothing, until its caller cancels it (or its deadline passes).
class Held final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit Held(std::atomic<int>* open) : open_(open) { ++*open_; }
  void OnCancel() override { Finish(grpc::Status::CANCELLED); }
  void OnDone() override {
    --*open_;
    delete this;
  }

 private:
  std::atomic<int>* const open_;
};

class Refused final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit Refused(grpc::StatusCode code) {
    Finish(grpc::Status(code, code == grpc::StatusCode::INVALID_ARGUMENT
                                  ? "prompt: refused by the script"
                                  : "refused by the script"));
  }
  void OnDone() override { delete this; }
};

uint64_t SeedOf(const v1::GenerateRequest& r) {
  return r.sampling().seed() != 0 ? r.sampling().seed() : 4242;
}

}  // namespace

class ScriptedWorker::Generator final : public v1::Generator::CallbackService {
 public:
  explicit Generator(ScriptedWorker* w) : w_(w) {}
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext*, const v1::GenerateRequest* request) override {
    ++w_->counts_.generates;
    const Script s = w_->script();
    if (s.mute) return new Held(&w_->counts_.open);
    if (s.refuse) return new Refused(*s.refuse);
    return new Stream(&w_->counts_, SeedOf(*request), 0, request->stopping().max_tokens(),
                      s.fail_after_tokens, s);
  }
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest*,
                                         v1::ModelInfo* info) override {
    info->set_contract_fingerprint("scripted");
    auto* r = context->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

 private:
  ScriptedWorker* const w_;
};

class ScriptedWorker::Worker final : public v1::Worker::CallbackService {
 public:
  explicit Worker(ScriptedWorker* w) : w_(w) {}
  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context, const v1::GetLoadRequest*,
                                    v1::Load*) override {
    auto* r = context->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerWriteReactor<v1::GenerateResponse>* Resume(grpc::CallbackServerContext*,
                                                         const v1::ResumeRequest* r) override {
    ++w_->counts_.resumes;
    if (w_->script().mute) return new Held(&w_->counts_.open);
    const uint64_t seed = SeedOf(r->request());
    bool own =
        std::vector<int32_t>(r->prompt_ids().begin(), r->prompt_ids().end()) == kScriptedPromptIds;
    for (int i = 0; i < r->emitted_ids_size(); ++i) {
      own &= r->emitted_ids(i) == ScriptedToken(seed, static_cast<uint64_t>(i));
    }
    if (!own) ++w_->counts_.bad_resumes;
    {
      MutexLock l(&w_->mu_);
      w_->resumed_at_.push_back(static_cast<size_t>(r->emitted_ids_size()));
    }
    const Script s = w_->script();
    return new Stream(&w_->counts_, seed, static_cast<uint64_t>(r->emitted_ids_size()),
                      r->request().stopping().max_tokens(), s.resume_fail_after_tokens, s);
  }

 private:
  ScriptedWorker* const w_;
};

ScriptedWorker::ScriptedWorker(Script script)
    : script_(std::move(script)),
      generator_(std::make_unique<Generator>(this)),
      worker_(std::make_unique<Worker>(this)) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(generator_.get());
  builder.RegisterService(worker_.get());
  server_ = builder.BuildAndStart();
}

ScriptedWorker::~ScriptedWorker() {
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
}

void ScriptedWorker::set_script(const Script& script) {
  MutexLock l(&mu_);
  script_ = script;
}

Script ScriptedWorker::script() const {
  MutexLock l(&mu_);
  return script_;
}

std::vector<size_t> ScriptedWorker::resumed_at() const {
  MutexLock l(&mu_);
  return resumed_at_;
}

}  // namespace walsh::testing
