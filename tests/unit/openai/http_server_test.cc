// The OpenAI face's HTTP server and its exchanges in process (openai/http_server.h,
// openai/http_exchange.h), driven over real loopback sockets: whole answers and event streams
// with the request's id, the head check answering before a body is read, the body limit and the
// header deadline, a client that hangs up mid-stream (499, and the handler's stream ends), and the
// per-client connection limit.
#include "openai/http_server.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "gtest/gtest.h"
#include "tests/util/eventually.h"
#include "tests/util/loopback_client.h"

namespace walsh {
namespace {

using std::chrono::milliseconds;
using testing::Client;

// What the Finished callback saw.
struct Outcomes {
  Mutex mu;
  std::vector<std::pair<std::string, int>> finished ABSL_GUARDED_BY(mu);  // path, status
  int StatusOf(const std::string& path) {
    MutexLock l(&mu);
    for (const auto& [p, status] : finished) {
      if (p == path) return status;
    }
    return 0;
  }
};

struct Served {
  Outcomes outcomes;
  std::atomic<int> handled{0};
  std::atomic<bool> stream_ended{false};
  std::unique_ptr<HttpServer> server;

  explicit Served(HttpServerOptions options) {
    options.listen = "127.0.0.1:0";
    auto started = HttpServer::Start(
        std::move(options),
        [](const HttpExchange& x) -> absl::optional<ApiError> {
          if (x.path() != "/secret") return absl::nullopt;
          return ApiError{.http_status = 401, .message = "no key", .type = "auth"};
        },
        [this](HttpExchange& x) { Handle(x); },
        [this](const HttpExchange& x, int status, double) {
          MutexLock l(&outcomes.mu);
          outcomes.finished.emplace_back(x.path(), status);
        });
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) server = *std::move(started);
  }

  void Handle(HttpExchange& x) {
    ++handled;
    if (x.path() == "/json") {
      x.SendJson(200, {{"ok", true}, {"body_bytes", x.body().size()}});
    } else if (x.path() == "/events") {
      if (!x.StartEvents()) return;
      (void)x.SendEvent("a");
      (void)x.SendEvent("b");
      x.EndEvents();
    } else if (x.path() == "/endless") {
      if (!x.StartEvents()) return;
      const std::string event(1024, 'e');
      while (x.SendEvent(event)) {
      }
      stream_ended = true;
    } else {
      x.SendText(404, "text/plain", "no such path");
    }
  }
};

TEST(HttpServer, AnswersWholeAndAsEventsWithTheRequestsId) {
  Served s({});
  ASSERT_NE(s.server, nullptr);
  Client json(s.server->port());
  json.Send(
      "POST /json HTTP/1.1\r\nHost: x\r\nx-request-id: r-1\r\nContent-Length: 5\r\n"
      "Connection: close\r\n\r\nhello");
  const std::string whole = json.Read();
  EXPECT_EQ(whole.rfind("HTTP/1.1 200", 0), 0u) << whole;
  EXPECT_NE(whole.find("x-request-id: r-1"), std::string::npos) << whole;
  EXPECT_NE(whole.find("Content-Length: "), std::string::npos) << whole;
  EXPECT_NE(whole.find(R"({"body_bytes":5,"ok":true})"), std::string::npos) << whole;

  Client events(s.server->port());
  events.Send("GET /events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string stream = events.Read();
  EXPECT_NE(stream.find("text/event-stream"), std::string::npos) << stream;
  EXPECT_NE(stream.find("x-request-id: "), std::string::npos) << stream;  // one is made up
  const size_t a = stream.find("data: a\n\n"), b = stream.find("data: b\n\n");
  ASSERT_NE(a, std::string::npos) << stream;
  ASSERT_NE(b, std::string::npos) << stream;
  EXPECT_LT(a, b);
  EXPECT_TRUE(testing::Eventually([&] { return s.outcomes.StatusOf("/events") == 200; }));
  EXPECT_EQ(s.outcomes.StatusOf("/json"), 200);
}

TEST(HttpServer, TheHeadCheckAnswersBeforeTheBodyIsRead) {
  Served s({});
  ASSERT_NE(s.server, nullptr);
  Client c(s.server->port());
  // A body of a megabyte is announced and never sent: the answer comes anyway.
  c.Send("POST /secret HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
  const std::string got = c.Read(milliseconds(10000), "\"auth\"");
  EXPECT_EQ(got.rfind("HTTP/1.1 401", 0), 0u) << got;
  EXPECT_NE(got.find("no key"), std::string::npos) << got;
  EXPECT_EQ(s.handled, 0);
}

TEST(HttpServer, ABodyPastTheLimitAndHeadersPastTheirDeadlineAreRefused) {
  HttpServerOptions o;
  o.max_body_bytes = 100;
  o.header_timeout = milliseconds(300);
  Served s(o);
  ASSERT_NE(s.server, nullptr);
  Client big(s.server->port());
  big.Send("POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n");
  const std::string too_large = big.Read(milliseconds(10000), "\r\n\r\n");
  EXPECT_EQ(too_large.rfind("HTTP/1.1 413", 0), 0u) << too_large;

  Client slow(s.server->port());
  slow.Send("GET /json HTTP/1.1\r\nHost: x\r\n");  // the headers never end
  const std::string late = slow.Read();
  EXPECT_EQ(late.rfind("HTTP/1.1 408", 0), 0u) << late;
  EXPECT_TRUE(slow.closed_by_server());
  EXPECT_EQ(s.handled, 0);
}

TEST(HttpServer, AClientThatHangsUpMidStreamEndsItAndCounts499) {
  HttpServerOptions o;
  o.stream.max_buffered_bytes = 16 << 10;
  Served s(o);
  ASSERT_NE(s.server, nullptr);
  {
    Client c(s.server->port());
    c.Send("GET /endless HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_NE(c.Read(milliseconds(10000), "data: eee").find("data: eee"), std::string::npos);
  }  // hangs up
  EXPECT_TRUE(testing::Eventually([&] { return s.stream_ended.load(); }));
  EXPECT_TRUE(testing::Eventually([&] { return s.outcomes.StatusOf("/endless") == 499; }));
}

TEST(HttpServer, ConnectionsPastTheClientsLimitAreClosedAsTheyArrive) {
  HttpServerOptions o;
  o.max_connections_per_client = 2;
  Served s(o);
  ASSERT_NE(s.server, nullptr);
  Client first(s.server->port()), second(s.server->port());
  ASSERT_TRUE(first.connected() && second.connected());
  // Both are open (the server answers on them) before the third arrives.
  first.Send("GET /json HTTP/1.1\r\nHost: x\r\n\r\n");
  second.Send("GET /json HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(first.Read(milliseconds(10000), "true}").find("true}"), std::string::npos);
  EXPECT_NE(second.Read(milliseconds(10000), "true}").find("true}"), std::string::npos);
  Client third(s.server->port());
  const std::string got = third.Read(milliseconds(5000));
  EXPECT_TRUE(third.closed_by_server());
  EXPECT_EQ(got, "");
  // Once one leaves, a new one is served.
  first.Close();
  EXPECT_TRUE(testing::Eventually([&] {
    Client next(s.server->port());
    next.Send("GET /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    return next.Read(milliseconds(2000)).find("true}") != std::string::npos;
  }));
}

}  // namespace
}  // namespace walsh
