// The OpenAI face in process (openai/openai_server.h) over a scripted worker's gRPC server, as
// the gateway and the worker serve it: completions whole and streamed, refusals as OpenAI errors
// naming their field, /health and /v1/models, and a client that hangs up cancelling its call.
#include "openai/openai_server.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/eventually.h"
#include "tests/util/loopback_client.h"
#include "tests/util/scripted_worker.h"

namespace walsh {
namespace {

using std::chrono::milliseconds;
using testing::Client;
using testing::ScriptedWorker;

struct Face {
  explicit Face(testing::Script script) : worker(script), metrics(registry, "walsh_test") {
    OpenAiServerOptions o;
    o.http.listen = "127.0.0.1:0";
    o.served_model_name = "scripted-model";
    o.ready = [this] { return ready.load(); };
    o.routable = [] { return true; };
    o.fingerprint = [] { return std::string("scripted"); };
    o.worker_wait = milliseconds(200);
    auto started = OpenAiServer::Start(std::move(o), worker.server(), &metrics);
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) server = *std::move(started);
  }
  // The answer to one request (Connection: close): status line, headers, body.
  std::string Ask(const std::string& method, const std::string& path,
                  const std::string& body = "") {
    Client c(server->port());
    c.Send(method + " " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
           "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
           body);
    return c.Read();
  }

  std::atomic<bool> ready{true};
  ScriptedWorker worker;
  MetricsRegistry registry;
  HttpMetrics metrics;
  std::unique_ptr<OpenAiServer> server;
};

nlohmann::json BodyOf(const std::string& answer) {
  const size_t at = answer.find("\r\n\r\n");
  if (at == std::string::npos) return nullptr;
  return nlohmann::json::parse(answer.substr(at + 4), nullptr, /*allow_exceptions=*/false);
}

TEST(OpenAiServer, CompletionsAnswerWholeAndStreamed) {
  Face f({.text_bytes = 1});
  ASSERT_NE(f.server, nullptr);
  const std::string whole = f.Ask(
      "POST", "/v1/completions", R"({"model": "scripted-model", "prompt": "hi", "max_tokens": 4})");
  ASSERT_EQ(whole.rfind("HTTP/1.1 200", 0), 0u) << whole;
  const nlohmann::json j = BodyOf(whole);
  EXPECT_EQ(j["object"], "text_completion") << j;
  EXPECT_EQ(j["model"], "scripted-model") << j;
  EXPECT_EQ(j["choices"][0]["text"], "xxxx") << j;
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length") << j;
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3) << j;
  EXPECT_EQ(j["usage"]["completion_tokens"], 4) << j;

  const std::string stream =
      f.Ask("POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 3, "stream": true})");
  ASSERT_EQ(stream.rfind("HTTP/1.1 200", 0), 0u) << stream;
  EXPECT_NE(stream.find("text/event-stream"), std::string::npos) << stream;
  std::string text;
  for (size_t at = stream.find("data: {"); at != std::string::npos;
       at = stream.find("data: {", at + 1)) {
    const nlohmann::json chunk = nlohmann::json::parse(
        stream.substr(at + 6, stream.find('\n', at) - at - 6), nullptr, false);
    ASSERT_FALSE(chunk.is_discarded()) << stream;
    text += chunk["choices"][0].value("text", "");
  }
  EXPECT_EQ(text, "xxx") << stream;
  EXPECT_NE(stream.find("data: [DONE]"), std::string::npos) << stream;
}

TEST(OpenAiServer, RefusalsAreOpenAiErrorsNamingTheirField) {
  Face f({});
  ASSERT_NE(f.server, nullptr);
  const std::string other =
      f.Ask("POST", "/v1/completions", R"({"model": "another", "prompt": "hi"})");
  EXPECT_EQ(other.rfind("HTTP/1.1 404", 0), 0u) << other;
  EXPECT_EQ(BodyOf(other)["error"]["param"], "model") << other;
  EXPECT_EQ(BodyOf(other)["error"]["code"], "model_not_found") << other;

  const std::string range =
      f.Ask("POST", "/v1/completions", R"({"prompt": "hi", "temperature": -1})");
  EXPECT_EQ(range.rfind("HTTP/1.1 400", 0), 0u) << range;
  EXPECT_EQ(BodyOf(range)["error"]["param"], "temperature") << range;

  const std::string broken = f.Ask("POST", "/v1/completions", R"({"prompt": )");
  EXPECT_EQ(broken.rfind("HTTP/1.1 400", 0), 0u) << broken;
  EXPECT_EQ(BodyOf(broken)["error"]["type"], "invalid_request_error") << broken;

  f.worker.set_script({.refuse = grpc::StatusCode::INVALID_ARGUMENT});
  const std::string refused = f.Ask("POST", "/v1/completions", R"({"prompt": "hi"})");
  EXPECT_EQ(refused.rfind("HTTP/1.1 400", 0), 0u) << refused;
  EXPECT_EQ(f.worker.counts().generates, 1);  // only the request that passed the face's checks
}

TEST(OpenAiServer, HealthFollowsReadinessAndModelsListTheServedName) {
  Face f({});
  ASSERT_NE(f.server, nullptr);
  EXPECT_EQ(f.Ask("GET", "/health").rfind("HTTP/1.1 200", 0), 0u);
  const nlohmann::json models = BodyOf(f.Ask("GET", "/v1/models"));
  EXPECT_EQ(models["data"][0]["id"], "scripted-model") << models;
  f.ready = false;
  EXPECT_EQ(f.Ask("GET", "/health").rfind("HTTP/1.1 503", 0), 0u);
  EXPECT_EQ(f.Ask("GET", "/v1/nothing").rfind("HTTP/1.1 404", 0), 0u);
}

TEST(OpenAiServer, AClientThatHangsUpCancelsItsCall) {
  Face f({.mute = true});
  ASSERT_NE(f.server, nullptr);
  {
    Client c(f.server->port());
    c.Send(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 32\r\n\r\n"
        R"({"prompt": "hi", "stream": true})");
    ASSERT_TRUE(testing::Eventually([&] { return f.worker.counts().open.load() == 1; }));
  }  // hangs up while the worker holds the call
  EXPECT_TRUE(testing::Eventually([&] { return f.worker.counts().open.load() == 0; }));
}

}  // namespace
}  // namespace walsh
