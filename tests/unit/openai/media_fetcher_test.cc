// MediaFetcher against a scripted origin on loopback (plain and TLS, with the throwaway CA of
// scripts/make-test-ca): what an allowed host serves comes back byte for byte, however it is
// framed; every refusal says why and names the flag that governs it.
#include "openai/media_fetcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "openai/http_flags.h"
#include "tests/util/test_util.h"

namespace walsh {
namespace {

using ::testing::HasSubstr;

// What the origin writes on a connection, and whether it then holds it open until it stops.
struct Reply {
  Reply(std::string b, bool h = false) : bytes(std::move(b)), hold(h) {}  // NOLINT: implicit
  Reply(const char* b) : bytes(b), hold(false) {}                         // NOLINT: implicit
  std::string bytes;
  bool hold;
};

// Answers each connection, one at a time, with what `answer` returns for the request's head.
class Origin {
 public:
  using Answer = std::function<Reply(const std::string& head)>;
  Origin(const char* address, Answer answer, const std::string& cert = "",
         const std::string& key = "")
      : answer_(std::move(answer)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, address, &a.sin_addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 8);
    if (!cert.empty()) {
      tls_ = SSL_CTX_new(TLS_server_method());
      EXPECT_EQ(SSL_CTX_use_certificate_chain_file(tls_, cert.c_str()), 1);
      EXPECT_EQ(SSL_CTX_use_PrivateKey_file(tls_, key.c_str(), SSL_FILETYPE_PEM), 1);
    }
    thread_ = std::thread([this] { Serve(); });
  }
  ~Origin() {
    stop_ = true;
    thread_.join();
    close(fd_);
    if (tls_ != nullptr) SSL_CTX_free(tls_);
  }
  int port() const { return port_; }
  int connections() const { return connections_; }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++connections_;
      SSL* ssl = nullptr;
      if (tls_ != nullptr) {
        ssl = SSL_new(tls_);
        SSL_set_fd(ssl, c);
        if (SSL_accept(ssl) != 1) {  // a client that refused the certificate
          SSL_free(ssl);
          close(c);
          continue;
        }
      }
      std::string head;
      char buf[4096];
      while (head.find("\r\n\r\n") == std::string::npos) {
        const int n = ssl != nullptr ? SSL_read(ssl, buf, sizeof buf)
                                     : static_cast<int>(read(c, buf, sizeof buf));
        if (n <= 0) break;
        head.append(buf, static_cast<size_t>(n));
      }
      const Reply reply = answer_(head);
      const std::string& out = reply.bytes;
      if (ssl != nullptr) {
        if (!out.empty()) SSL_write(ssl, out.data(), static_cast<int>(out.size()));
      } else {
        (void)!write(c, out.data(), out.size());
      }
      while (reply.hold && !stop_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (ssl != nullptr) SSL_shutdown(ssl);
      if (ssl != nullptr) SSL_free(ssl);
      close(c);
    }
  }

  Answer answer_;
  int fd_ = -1;
  int port_ = 0;
  SSL_CTX* tls_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

std::string Ok(const std::string& body) {
  return absl::StrCat("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: ", body.size(),
                      "\r\n\r\n", body);
}

// Every byte value, so a framing bug that drops or adds one shows.
std::string Image(size_t size) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>((i * 7 + i / 256) & 0xff);
  return s;
}

MediaUrl Url(const std::string& spec) {
  absl::StatusOr<MediaUrl> u = ParseMediaUrl(spec);
  EXPECT_TRUE(u.ok()) << spec << ": " << u.status();
  return u.ok() ? *u : MediaUrl{};
}

std::unique_ptr<MediaFetcher> Fetcher(std::vector<std::string> hosts, int64_t max_bytes = 1 << 20,
                                      std::string ca_file = "",
                                      absl::Duration timeout = absl::Seconds(5)) {
  MediaFetchOptions o;
  o.allowed_domains = std::move(hosts);
  o.max_bytes = max_bytes;
  o.ca_file = std::move(ca_file);
  o.timeout = timeout;
  auto f = MediaFetcher::Create(o);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? std::move(*f) : nullptr;
}

TEST(MediaUrl, ParsesWhatIsFetchedAndRefusesTheRest) {
  MediaUrl u = Url("HTTPS://Example.COM:8443/a/b.png?x=1#frag");
  EXPECT_TRUE(u.https);
  EXPECT_EQ(u.host, "example.com");
  EXPECT_EQ(u.port, 8443);
  EXPECT_EQ(u.target, "/a/b.png?x=1");
  EXPECT_EQ(u.Spec(), "https://example.com:8443/a/b.png?x=1");
  EXPECT_EQ(Url("http://h").target, "/");
  EXPECT_EQ(Url("http://h?q").target, "/?q");
  EXPECT_EQ(Url("http://h:80/").HostHeader(), "h");
  EXPECT_EQ(Url("http://[::1]:81/x").HostHeader(), "[::1]:81");
  EXPECT_TRUE(Url("http://127.0.0.1/").ip_literal());
  EXPECT_FALSE(Url("http://localhost/").ip_literal());
  for (const char* bad :
       {"ftp://h/x", "file:///etc/passwd", "http://", "http:///x", "http://user@h/x", "http://h:0/",
        "http://h:65536/", "http://h:+80/", "http://h:/x", "http://h/a b", "http://h/a\r\nX: y",
        "http://h\\@evil/", "http://[::1/", "http://[zz]/", "http://h%2f/"}) {
    EXPECT_FALSE(ParseMediaUrl(bad).ok()) << bad;
  }
  const MediaUrl base = Url("https://a.test:444/dir/x.png");
  EXPECT_EQ(ResolveLocation(base, "/y.png")->Spec(), "https://a.test:444/y.png");
  EXPECT_EQ(ResolveLocation(base, "http://b.test/z")->Spec(), "http://b.test/z");
  EXPECT_FALSE(ResolveLocation(base, "y.png").ok());
  EXPECT_FALSE(ResolveLocation(base, "//b.test/z").ok());
}

TEST(MediaFetcher, FetchesWhatAnAllowedHostServesHoweverItIsFramed) {
  const std::string image = Image(70000);
  std::string chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (size_t at = 0; at < image.size(); at += 30000) {
    const std::string piece = image.substr(at, 30000);
    absl::StrAppend(&chunked, absl::Hex(piece.size()), ";ext=1\r\n", piece, "\r\n");
  }
  absl::StrAppend(&chunked, "0\r\nTrailer: x\r\n\r\n");
  Origin origin("127.0.0.1", [&](const std::string& head) -> Reply {
    if (absl::StartsWith(head, "GET /length ")) return Ok(image) + "trailing junk";
    if (absl::StartsWith(head, "GET /chunked ")) return chunked;
    if (absl::StartsWith(head, "GET /chunked-held ")) return Reply(chunked, /*hold=*/true);
    if (absl::StartsWith(head, "GET /close ")) return "HTTP/1.0 200 OK\r\n\r\n" + image;
    if (absl::StartsWith(head, "GET /continue "))
      return "HTTP/1.1 100 Continue\r\n\r\n" + Ok(image);
    if (absl::StartsWith(head, "GET /hop ")) {
      return "HTTP/1.1 302 Found\r\nLocation: /length\r\nContent-Length: 0\r\n\r\n";
    }
    return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
  });
  auto f = Fetcher({absl::StrCat("127.0.0.1:", origin.port())});
  // Last: the origin answers one connection at a time, and holds this one until it stops.
  for (const char* path : {"/length", "/chunked", "/close", "/continue", "/hop", "/chunked-held"}) {
    absl::StatusOr<std::string> got = f->Fetch(
        Url(absl::StrCat("http://127.0.0.1:", origin.port(), path)), f->options().max_bytes);
    ASSERT_TRUE(got.ok()) << path << ": " << got.status();
    EXPECT_EQ(*got, image) << path;
  }
}

// Past the allow-list every failure reads the same to the client ("could not fetch URL"), so
// fetches cannot map an allowed host's ports and paths; the reason, naming the flag that would
// change it, is the caller's to log.
TEST(MediaFetcher, FailuresLookAlikeAndTheDetailSaysWhy) {
  const std::string image = Image(5000);
  Origin origin("127.0.0.1", [&](const std::string& head) -> Reply {
    if (absl::StartsWith(head, "GET /missing ")) return "HTTP/1.1 404 Not Found\r\n\r\n";
    if (absl::StartsWith(head, "GET /big ")) return Ok(image);
    if (absl::StartsWith(head, "GET /big-unsaid ")) return "HTTP/1.1 200 OK\r\n\r\n" + image;
    if (absl::StartsWith(head, "GET /big-chunked ")) {
      return absl::StrCat("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n", image,
                          "\r\n0\r\n\r\n");
    }
    if (absl::StartsWith(head, "GET /short ")) {
      return "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    }
    if (absl::StartsWith(head, "GET /gzip ")) {
      return "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc";
    }
    if (absl::StartsWith(head, "GET /away ")) {
      return absl::StrCat("HTTP/1.1 301 Moved\r\nLocation: http://localhost:", 1, "/x\r\n\r\n");
    }
    if (absl::StartsWith(head, "GET /loop "))
      return "HTTP/1.1 302 Found\r\nLocation: /loop\r\n\r\n";
    if (absl::StartsWith(head, "GET /silent ")) return Reply("", /*hold=*/true);
    if (absl::StartsWith(head, "GET /interim ")) {
      std::string heads;
      for (int i = 0; i < 20; ++i) heads += "HTTP/1.1 100 Continue\r\n\r\n";
      return heads + Ok("abc");
    }
    if (absl::StartsWith(head, "GET /small ")) return Ok(image.substr(0, 200));
    return "garbage\r\n\r\n";
  });
  const std::string allowed = absl::StrCat("127.0.0.1:", origin.port());
  auto f = Fetcher({allowed}, 4096, "", absl::Milliseconds(500));
  const std::string uniform =
      "could not fetch URL (the server's log says why; --media-fetch-max-bytes and "
      "--media-fetch-timeout-seconds bound a fetch)";
  const auto failed = [&](const MediaUrl& url, int64_t max_bytes) {
    std::string detail;
    absl::StatusOr<std::string> got = f->Fetch(url, max_bytes, &detail);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << url.Spec();
    std::string message(got.status().message());
    absl::StrReplaceAll({{url.Spec(), "URL"}}, &message);
    EXPECT_EQ(message, uniform) << url.Spec();
    return detail;
  };
  const auto refused = [&](const std::string& path) {
    return failed(Url(absl::StrCat("http://", allowed, path)), f->options().max_bytes);
  };
  EXPECT_THAT(refused("/missing"), HasSubstr("the server answered 404"));
  for (const char* big : {"/big", "/big-unsaid", "/big-chunked"}) {
    EXPECT_THAT(
        refused(big),
        HasSubstr(
            "larger than the 4096 bytes its request may still fetch (--media-fetch-max-bytes"));
  }
  EXPECT_THAT(refused("/short"), HasSubstr("closed before the whole body"));
  EXPECT_THAT(refused("/gzip"), HasSubstr("Content-Encoding \"gzip\""));
  EXPECT_THAT(refused("/away"),
              HasSubstr("redirected: the host \"localhost:1\" is not in --allowed-media-domains"));
  EXPECT_THAT(refused("/loop"), HasSubstr("more than 3 redirects"));
  EXPECT_THAT(refused("/garbage"), HasSubstr("not HTTP/1.x"));
  EXPECT_THAT(refused("/interim"), HasSubstr("more than 8 interim (1xx) answers"));
  // The request's budget, not the flag's, bounds each fetch.
  const MediaUrl small = Url(absl::StrCat("http://127.0.0.1:", origin.port(), "/small"));
  EXPECT_TRUE(f->Fetch(small, 200).ok());
  EXPECT_THAT(failed(small, 199),
              HasSubstr("larger than the 199 bytes its request may still fetch"));

  // A host or a port off the list is refused, by name, before any connection.
  const int before = origin.connections();
  absl::StatusOr<std::string> other = f->Fetch(
      Url(absl::StrCat("http://localhost:", origin.port(), "/big")), f->options().max_bytes);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(other.status().message()),
              HasSubstr(absl::StrCat("the host \"localhost:", origin.port(),
                                     "\" is not in --allowed-media-domains")));
  auto other_port = Fetcher({absl::StrCat("127.0.0.1:", origin.port() + 1), "127.0.0.1"});
  absl::StatusOr<std::string> port = other_port->Fetch(small, 200);
  EXPECT_EQ(port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(port.status().message()), HasSubstr("is not in --allowed-media-domains"));
  auto none = Fetcher({});
  absl::StatusOr<std::string> off = none->Fetch(
      Url(absl::StrCat("http://127.0.0.1:", origin.port(), "/big")), none->options().max_bytes);
  EXPECT_THAT(std::string(off.status().message()),
              HasSubstr("--allowed-media-domains names no host"));
  // A name on the list that resolves to an internal address is never dialed: only a literal
  // address on the list reaches one.
  auto named = Fetcher({absl::StrCat("localhost:", origin.port())});
  std::string why;
  absl::StatusOr<std::string> internal =
      named->Fetch(Url(absl::StrCat("http://localhost:", origin.port(), "/small")), 200, &why);
  EXPECT_EQ(internal.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(internal.status().message()), HasSubstr("could not fetch"));
  EXPECT_THAT(why, HasSubstr("a loopback address, which only a literal address on "
                             "--allowed-media-domains may name"));
  EXPECT_EQ(origin.connections(), before);
  EXPECT_TRUE(f->Fetch(small, 200).ok()) << "the origin still answers, so it would have counted";

  // Last: the origin holds this connection until it stops.
  const absl::Time start = absl::Now();
  EXPECT_THAT(refused("/silent"),
              HasSubstr("took longer than 500ms (--media-fetch-timeout-seconds)"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the deadline bounds the wait";
}

TEST(MediaFetcher, HttpsTrustsTheCaGivenAndChecksTheName) {
  testing::TempDir dir;
  for (const char* name : {"pki", "other"}) {
    const auto made = testing::RunProcess(
        {std::string(WALSH_SOURCE_DIR) + "/scripts/make-test-ca", dir.File(name)});
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  const std::string pki = dir.File("pki") + "/";
  const std::string image = Image(20000);
  const auto serve = [&](const std::string&) { return Reply(Ok(image)); };
  // The certificate names localhost and 127.0.0.1; 127.0.0.2 is loopback too, but not named.
  Origin plain("127.0.0.1", serve);
  Origin origin(
      "127.0.0.1",
      [&](const std::string& head) -> Reply {
        if (absl::StartsWith(head, "GET /down ")) {
          return absl::StrCat("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:", plain.port(),
                              "/x.png\r\nContent-Length: 0\r\n\r\n");
        }
        return Ok(image);
      },
      pki + "server.pem", pki + "server.key");
  Origin unnamed("127.0.0.2", serve, pki + "server.pem", pki + "server.key");
  const std::string at = absl::StrCat("127.0.0.1:", origin.port());
  auto f = Fetcher(
      {at, absl::StrCat("127.0.0.2:", unnamed.port()), absl::StrCat("127.0.0.1:", plain.port())},
      1 << 20, pki + "ca.pem");
  absl::StatusOr<std::string> got =
      f->Fetch(Url(absl::StrCat("https://", at, "/x.png")), f->options().max_bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, image);
  const auto why = [&](const MediaFetcher& fetcher, const std::string& url) {
    std::string detail;
    EXPECT_FALSE(fetcher.Fetch(Url(url), fetcher.options().max_bytes, &detail).ok()) << url;
    return detail;
  };
  EXPECT_THAT(why(*f, absl::StrCat("https://127.0.0.2:", unnamed.port(), "/x.png")),
              HasSubstr("is not trusted"));
  EXPECT_THAT(why(*f, absl::StrCat("https://", at, "/down")),
              HasSubstr("a redirect from https to http"));
  EXPECT_EQ(plain.connections(), 0);
  auto other = Fetcher({at}, 1 << 20, dir.File("other") + "/ca.pem");
  const std::string untrusted = why(*other, absl::StrCat("https://", at, "/x.png"));
  EXPECT_THAT(untrusted, HasSubstr("is not trusted"));
  EXPECT_THAT(untrusted, HasSubstr("--media-ca-file"));

  MediaFetchOptions missing;
  missing.allowed_domains = {"h"};
  missing.ca_file = dir.File("absent.pem");
  EXPECT_THAT(std::string(MediaFetcher::Create(missing).status().message()),
              HasSubstr("--media-ca-file"));
}

// An entry without a port allows its URL scheme's default port; one with a port, that port only,
// whatever the scheme. Allowed or not is told apart by the answer: a refusal by name
// (INVALID_ARGUMENT), or an attempt that finds nothing listening (UNAVAILABLE).
TEST(MediaFetcher, AllowListEntriesOwnTheirPorts) {
  HttpFlags flags;
  flags.allowed_media_domains = "127.0.0.1,127.0.0.2:443";
  absl::StatusOr<MediaFetchOptions> o = flags.Media();
  ASSERT_TRUE(o.ok()) << o.status();
  o->timeout = absl::Seconds(2);
  auto f = MediaFetcher::Create(*o);
  ASSERT_TRUE(f.ok()) << f.status();
  const auto code = [&](const std::string& url) {
    return (*f)->Fetch(Url(url), 100).status().code();
  };
  EXPECT_EQ(code("http://127.0.0.1/x"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(code("https://127.0.0.1/x"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(code("http://127.0.0.1:8080/x"), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code("https://127.0.0.2/x"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(code("http://127.0.0.2:443/x"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(code("http://127.0.0.2/x"), absl::StatusCode::kInvalidArgument);
}

TEST(MediaFlags, EachNamesItsFlag) {
  const auto error = [](HttpFlags f) { return std::string(f.Media().status().message()); };
  HttpFlags f;
  f.allowed_media_domains = " Images.Example.com,127.0.0.1 ,,h:8080,[::1]:9000,g:443";
  absl::StatusOr<MediaFetchOptions> o = f.Media();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->allowed_domains, (std::vector<std::string>{"images.example.com", "127.0.0.1",
                                                          "h:8080", "[::1]:9000", "g:443"}));
  for (const char* bad : {"https://h", "h/x", "a b", "u@h", "h:0", "h:x", "h?x", "h#f"}) {
    HttpFlags b;
    b.allowed_media_domains = bad;
    EXPECT_THAT(error(b), HasSubstr("--allowed-media-domains")) << bad;
  }
  HttpFlags t;
  t.media_fetch_timeout_seconds = 0;
  EXPECT_THAT(error(t), HasSubstr("--media-fetch-timeout-seconds"));
  HttpFlags m;
  m.media_fetch_max_bytes = 0;
  EXPECT_THAT(error(m), HasSubstr("--media-fetch-max-bytes"));
  HttpFlags n;
  n.media_fetch_max_images = 257;
  EXPECT_THAT(error(n), HasSubstr("--media-fetch-max-images"));
  HttpFlags c;
  c.media_ca_file = "x.pem";
  EXPECT_THAT(error(c), HasSubstr("--media-ca-file needs --allowed-media-domains"));
}

}  // namespace
}  // namespace walsh
