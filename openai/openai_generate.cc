// POST /v1/chat/completions and /v1/completions: one Generate call, answered whole or as a
// stream of Server-Sent Events (docs/openai.md §Streaming).
#include <ctime>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/field_error.h"
#include "common/grpc_status.h"
#include "common/json_log.h"
#include "openai/chat_output_parser.h"
#include "openai/generate_call.h"
#include "openai/json_text.h"
#include "openai/openai_response.h"
#include "openai/openai_server.h"

namespace walsh {
namespace {

std::string RandomHex() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16));
}

// Turns the call's messages into the API's response: the whole body at the end, or one event
// per piece of output as it comes.
class Answer {
 public:
  Answer(HttpExchange* x, const OpenAiRequest& r, ResponseHeader header)
      : x_(x),
        r_(r),
        header_(std::move(header)),
        parser_(r.thinking, r.parse_tool_calls, r.forced_tool, r.parallel_tool_calls),
        logprobs_(r.chat) {}

  // False once the client cannot be written to.
  bool OnStarted(const v1::Started& s) {
    prompt_tokens_ = s.prompt_tokens();
    if (!r_.stream) return true;
    x_->StartEvents();
    if (!r_.chat) return true;
    nlohmann::json delta = {{"role", "assistant"}, {"content", ""}};
    return Emit(Choice(std::move(delta), nullptr));
  }

  bool OnTokens(const v1::Tokens& t) {
    completion_tokens_ += static_cast<uint32_t>(t.tokens_size());
    if (r_.logprobs) {
      for (const v1::Token& token : t.tokens()) logprobs_.Add(token);
    }
    if (!r_.chat) {
      text_ += t.text();
      if (!r_.stream) return true;
      return Emit(Choice(t.text(), nullptr));
    }
    return OnDelta(parser_.Feed(t.text()), nullptr);
  }

  void OnFinished(const v1::Finished& f) {
    reason_ = f.reason();
    prompt_tokens_ = f.usage().prompt_tokens();
    completion_tokens_ = f.usage().completion_tokens();
  }

  // The end of a stream that went well.
  void Complete() {
    if (r_.chat) OnDelta(parser_.Finish(), nullptr);
    const std::string finish = FinishReason(reason_, parser_.tool_calls_seen() > 0);
    if (!r_.stream) return SendWhole(finish);
    Emit(r_.chat ? Choice(nlohmann::json::object(), finish.c_str())
                 : Choice(std::string(), finish.c_str()));
    if (r_.include_usage) {
      nlohmann::json usage = ResponseBase(header_, true);
      usage["usage"] = Usage(prompt_tokens_, completion_tokens_);
      x_->SendEvent(JsonText(usage));
    }
    x_->SendEvent("[DONE]");
    x_->EndEvents();
  }

  // The end of a stream that failed (the client is still there).
  void Fail(const grpc::Status& s) {
    const ApiError e = ApiErrorOf(FromGrpcStatus(s), r_.field_names);
    if (x_->status() == 0) return x_->SendError(e);
    x_->SendEvent(JsonText(e.ToJson()));  // the stream is committed: the error is its last event
    x_->SendEvent("[DONE]");
    x_->EndEvents();
  }

 private:
  bool OnDelta(const ChatDelta& d, const char* finish) {
    if (!r_.stream) {
      all_.reasoning += d.reasoning;
      all_.content += d.content;
      for (const ParsedToolCall& c : d.tool_calls) all_.tool_calls.push_back(c);
      return true;
    }
    if (d.empty() && logprobs_.empty()) return true;
    return Emit(Choice(DeltaJson(d, call_id_base_), finish));
  }

  // One choice of a chunk: a chat delta (object) or a completion's text (string).
  nlohmann::json Choice(nlohmann::json delta_or_text, const char* finish) {
    nlohmann::json c = {{"index", 0}};
    c[r_.chat ? "delta" : "text"] = std::move(delta_or_text);
    c["logprobs"] = logprobs_.Take();
    c["finish_reason"] = finish == nullptr ? nlohmann::json(nullptr) : nlohmann::json(finish);
    return c;
  }

  bool Emit(nlohmann::json choice) {
    nlohmann::json chunk = ResponseBase(header_, true);
    chunk["choices"].push_back(std::move(choice));
    if (r_.include_usage) chunk["usage"] = nullptr;
    return x_->SendEvent(JsonText(chunk));
  }

  void SendWhole(const std::string& finish) {
    nlohmann::json body = ResponseBase(header_, false);
    nlohmann::json choice = {{"index", 0}};
    if (r_.chat) {
      nlohmann::json message = {{"role", "assistant"}};
      const bool calls = !all_.tool_calls.empty();
      message["content"] =
          calls && all_.content.empty() ? nlohmann::json(nullptr) : nlohmann::json(all_.content);
      if (r_.thinking) message["reasoning_content"] = all_.reasoning;
      if (calls) {
        message["tool_calls"] = nlohmann::json::array();
        for (const ParsedToolCall& c : all_.tool_calls) {
          message["tool_calls"].push_back(
              {{"id", ToolCallId(call_id_base_, c.index)},
               {"type", "function"},
               {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        }
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = text_;
    }
    choice["logprobs"] = logprobs_.Take();
    choice["finish_reason"] = finish;
    body["choices"].push_back(std::move(choice));
    body["usage"] = Usage(prompt_tokens_, completion_tokens_);
    x_->SendJson(200, body);
  }

  HttpExchange* x_;
  const OpenAiRequest& r_;
  const ResponseHeader header_;
  ChatOutputParser parser_;
  LogprobsBuilder logprobs_;
  const std::string call_id_base_ = RandomHex();  // tool-call ids, unique per answer
  ChatDelta all_;                                 // a whole chat answer
  std::string text_;                              // a whole completion
  std::string reason_ = "stop";
  uint32_t prompt_tokens_ = 0, completion_tokens_ = 0;
};

}  // namespace

absl::Status OpenAiServer::FetchImages(OpenAiRequest& r) const {
  const MediaFetchOptions& limits = media_->options();
  if (r.remote_images.size() > static_cast<size_t>(limits.max_images)) {
    return FieldError(r.remote_images[limits.max_images].field,
                      absl::StrCat("more than ", limits.max_images,
                                   " image URLs in one request (--media-fetch-max-images)"));
  }
  int64_t left = limits.max_bytes;
  for (OpenAiRequest::RemoteImage& image : r.remote_images) {
    const absl::Time start = absl::Now();
    std::string why;
    absl::StatusOr<std::string> bytes = media_->Fetch(image.url, left, &why);
    // "failed" whatever the origin did (MediaFetcher::Fetch); the log says what.
    const char* outcome = bytes.ok()                                ? "ok"
                          : absl::IsInvalidArgument(bytes.status()) ? "refused"
                                                                    : "failed";
    metrics_->image_fetches.counter({outcome}).Inc();
    if (!why.empty()) {
      LogJson("warning", "image_fetch_failed", {{"url", image.url.Spec()}, {"error", why}});
    }
    if (!absl::IsInvalidArgument(bytes.status())) {
      metrics_->image_fetch_duration.Observe(absl::ToDoubleSeconds(absl::Now() - start));
    }
    if (!bytes.ok()) return FieldError(image.field, bytes.status().message());
    left -= static_cast<int64_t>(bytes->size());
    r.generate.mutable_pieces()->mutable_pieces(image.piece)->set_image(*std::move(bytes));
  }
  return absl::OkStatus();
}

void OpenAiServer::Generate(HttpExchange& x, bool chat) {
  auto parsed = chat ? ParseChatCompletionRequest(x.body()) : ParseCompletionRequest(x.body());
  if (!parsed.ok()) return x.SendError(ApiErrorOf(parsed.status()));
  OpenAiRequest& r = *parsed;
  auto info = FleetModel(x);
  if (!info.ok()) return x.SendError(ApiErrorOf(info.status()));
  const v1::ModelInfo& model = *info;
  const std::string name = ServedName(model);
  if (!r.model.empty() && r.model != name) {
    return x.SendError(
        {404,
         absl::StrCat("model: ", Quoted(r.model), " is not served here (", Quoted(name), " is)"),
         "invalid_request_error", "model", "model_not_found"});
  }
  // After the cheap checks: a request refused anyway fetches nothing.
  if (absl::Status fetched = FetchImages(r); !fetched.ok()) {
    return x.SendError(ApiErrorOf(fetched));
  }
  if (options_.chat_content_special_tokens) JoinChatPieces(r.generate);
  // top_k at or past the vocabulary keeps every token: off, as vLLM clamps it.
  if (r.generate.sampling().top_k() >= static_cast<int64_t>(model.vocab_size())) {
    r.generate.mutable_sampling()->clear_top_k();
  }
  r.generate.set_request_id(x.request_id());
  ResponseHeader header{chat, absl::StrCat(chat ? "chatcmpl-" : "cmpl-", x.request_id()),
                        static_cast<int64_t>(std::time(nullptr)), name,
                        absl::StrCat("walsh-", model.contract_fingerprint().substr(0, 16))};
  Answer answer(&x, r, std::move(header));

  GenerateCall call(stub_.get(), r.generate, CallMetadata(x));
  bool client_gone = false;
  v1::GenerateResponse m;
  for (;;) {
    const GenerateCall::Next next = call.Wait(options_.disconnect_poll, &m);
    if (next == GenerateCall::Next::kDone) break;
    if (client_gone) continue;  // drain what was read until the cancelled call ends
    bool writable = !x.PeerGone();
    if (writable && next == GenerateCall::Next::kMessage) {
      if (m.has_started()) {
        writable = answer.OnStarted(m.started());
      } else if (m.has_tokens()) {
        writable = answer.OnTokens(m.tokens());
      } else if (m.has_finished()) {
        answer.OnFinished(m.finished());
      }
    }
    if (!writable) {
      client_gone = true;
      x.set_client_gone();
      call.Cancel();  // the worker frees the slot; the call ends CANCELLED
    }
  }
  if (client_gone) return;
  const grpc::Status s = call.status();
  if (s.ok()) {
    answer.Complete();
  } else {
    answer.Fail(s);
  }
}

}  // namespace walsh
