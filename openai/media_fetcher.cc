#include "openai/media_fetcher.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "openai/media_response.h"

namespace walsh {
namespace {

constexpr int kMaxInterimAnswers = 8;

absl::Status Failed(absl::string_view why) { return absl::UnavailableError(why); }

const char* InternalIpv4(const uint8_t* b) {
  if (b[0] == 0) return "unspecified";
  if (b[0] == 127) return "loopback";
  if (b[0] == 10 || (b[0] == 172 && (b[1] & 0xf0) == 16) || (b[0] == 192 && b[1] == 168)) {
    return "private";
  }
  if (b[0] == 100 && (b[1] & 0xc0) == 64) return "shared (carrier-grade NAT)";
  if (b[0] == 169 && b[1] == 254) return "link-local";
  if ((b[0] == 198 && (b[1] & 0xfe) == 18) || (b[0] == 192 && b[1] == 0 && b[2] == 0)) {
    return "reserved";
  }
  if (b[0] >= 224) return b[0] < 240 ? "multicast" : "reserved";
  return nullptr;
}

// Why an address may be fetched only when the allow-list names it literally: what sits behind
// it is the server's own network (loopback, private and link-local ranges, carrier-grade NAT),
// or it is no one host (unspecified, multicast, reserved). Null: a public address.
const char* InternalAddress(const sockaddr* a) {
  if (a->sa_family == AF_INET6) {
    const uint8_t* b = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr.s6_addr;
    static constexpr uint8_t kZero[16] = {};
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static constexpr uint8_t kNat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (std::memcmp(b, kZero, 15) == 0) return b[15] == 1 ? "loopback" : "unspecified";
    // Addresses that carry an IPv4 address are judged as it: mapped, compatible (::a.b.c.d),
    // NAT64 (64:ff9b::/96), 6to4 (2002::/16, the address in bytes 2..5).
    if (std::memcmp(b, kMapped, 12) == 0 || std::memcmp(b, kZero, 12) == 0 ||
        std::memcmp(b, kNat64, 12) == 0) {
      return InternalIpv4(b + 12);
    }
    if (b[0] == 0x20 && b[1] == 0x02) return InternalIpv4(b + 2);
    if ((b[0] & 0xfe) == 0xfc) return "private (unique local)";
    if (b[0] == 0xfe && (b[1] & 0x80) == 0x80) return "link-local or site-local";
    if (b[0] == 0xff) return "multicast";
    return nullptr;
  }
  if (a->sa_family != AF_INET) return "not an IP";
  return InternalIpv4(
      reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr));
}

std::string TlsErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? "unknown TLS error" : out;
}

// A write to a peer that closed raises SIGPIPE, which would end the process: held back while
// this thread fetches, and taken if it came.
class SigpipeHeld {
 public:
  SigpipeHeld() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~SigpipeHeld() {
    if (!was_pending_) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      const timespec now{0, 0};
      while (sigtimedwait(&pipe, nullptr, &now) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
  bool was_pending_ = false;
};

// One connection, plain or TLS, every wait bounded by the fetch's deadline.
class Connection {
 public:
  explicit Connection(absl::Time deadline) : deadline_(deadline) {}
  ~Connection() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  absl::Status Open(const MediaUrl& url, SSL_CTX* tls) {
    RETURN_IF_ERROR(Connect(url));
    if (url.https) RETURN_IF_ERROR(Handshake(url, tls));
    return absl::OkStatus();
  }

  absl::Status WriteAll(absl::string_view bytes) {
    while (!bytes.empty()) {
      RETURN_IF_ERROR(CheckDeadline());
      ssize_t n;
      if (ssl_ != nullptr) {
        n = SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size()));
        if (n <= 0) {
          RETURN_IF_ERROR(WaitTls(n, "sending the request"));
          continue;
        }
      } else {
        n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n < 0) {
          if (errno != EAGAIN && errno != EINTR) return Errno("sending the request");
          RETURN_IF_ERROR(Wait(POLLOUT));
          continue;
        }
      }
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  // Bytes appended to `out`; 0 at the end of the stream.
  absl::StatusOr<size_t> Read(std::string& out, size_t at_most) {
    char buf[16384];
    const size_t want = std::min(sizeof buf, at_most);
    for (;;) {
      // Checked before every read, not only when one would wait: a peer that never makes the
      // reader wait must not hold it past its deadline.
      RETURN_IF_ERROR(CheckDeadline());
      if (ssl_ != nullptr) {
        const int n = SSL_read(ssl_, buf, static_cast<int>(want));
        if (n > 0) {
          out.append(buf, static_cast<size_t>(n));
          return static_cast<size_t>(n);
        }
        const int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_ZERO_RETURN) return 0;
        RETURN_IF_ERROR(WaitTls(n, "reading the answer"));
        continue;
      }
      const ssize_t n = recv(fd_, buf, want, 0);
      if (n >= 0) {
        out.append(buf, static_cast<size_t>(n));
        return static_cast<size_t>(n);
      }
      if (errno != EAGAIN && errno != EINTR) return Errno("reading the answer");
      RETURN_IF_ERROR(Wait(POLLIN));
    }
  }

 private:
  absl::Status Errno(absl::string_view doing) const {
    return Failed(absl::StrCat(doing, ": ", std::strerror(errno)));
  }

  absl::Status CheckDeadline() const {
    if (absl::Now() >= deadline_) {
      return absl::DeadlineExceededError("the fetch took longer than its timeout");
    }
    return absl::OkStatus();
  }

  absl::Status Wait(short events) {
    for (;;) {
      const int64_t ms = absl::ToInt64Milliseconds(deadline_ - absl::Now());
      if (ms <= 0) return absl::DeadlineExceededError("the fetch took longer than its timeout");
      pollfd p{fd_, events, 0};
      const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
      if (r > 0) return absl::OkStatus();
      if (r < 0 && errno != EINTR) return Errno("waiting on the connection");
    }
  }

  // After an SSL call returned `ret` <= 0: waits for what it needs, or says why it failed.
  absl::Status WaitTls(int ret, absl::string_view doing) {
    switch (SSL_get_error(ssl_, ret)) {
      case SSL_ERROR_WANT_READ:
        return Wait(POLLIN);
      case SSL_ERROR_WANT_WRITE:
        return Wait(POLLOUT);
      default:
        return Failed(absl::StrCat(doing, ": ", TlsErrors()));
    }
  }

  // Connects to an address the name resolved to, once: the address checked is the one dialed.
  absl::Status Connect(const MediaUrl& url) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    // getaddrinfo has no deadline of its own: the resolver's (resolv.conf) bounds it.
    const int r = getaddrinfo(url.host.c_str(), std::to_string(url.port).c_str(), &hints, &found);
    if (r != 0) return Failed(absl::StrCat("cannot resolve ", url.host, ": ", gai_strerror(r)));
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);
    absl::Status last = Failed("no address");
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      // A literal address passed the allow-list by name; a name must lead somewhere public.
      if (const char* internal = InternalAddress(a->ai_addr); internal && !url.ip_literal()) {
        char text[INET6_ADDRSTRLEN] = "?";
        const void* at = a->ai_family == AF_INET6
                             ? static_cast<const void*>(
                                   &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr)
                             : &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr;
        inet_ntop(a->ai_family, at, text, sizeof text);
        last = Failed(absl::StrCat(url.host, " resolves to ", text, ", a ", internal,
                                   " address, which only a literal address on "
                                   "--allowed-media-domains may name"));
        continue;
      }
      fd_ = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd_ < 0) {
        last = Errno("socket");
        continue;
      }
      if (connect(fd_, a->ai_addr, a->ai_addrlen) == 0) return absl::OkStatus();
      if (errno == EINPROGRESS) {
        absl::Status waited = Wait(POLLOUT);
        if (absl::IsDeadlineExceeded(waited)) return waited;
        int error = 0;
        socklen_t len = sizeof error;
        if (waited.ok() && getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0) {
          return absl::OkStatus();
        }
        errno = error;
      }
      last =
          Failed(absl::StrCat("cannot connect to ", url.HostHeader(), ": ", std::strerror(errno)));
      close(fd_);
      fd_ = -1;
    }
    return last;
  }

  absl::Status Handshake(const MediaUrl& url, SSL_CTX* tls) {
    ssl_ = SSL_new(tls);
    if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) return Failed(TlsErrors());
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
    if (url.ip_literal()) {
      if (X509_VERIFY_PARAM_set1_ip_asc(param, url.host.c_str()) != 1) return Failed(TlsErrors());
    } else {
      SSL_set_tlsext_host_name(ssl_, url.host.c_str());
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      if (X509_VERIFY_PARAM_set1_host(param, url.host.c_str(), 0) != 1) {
        return Failed(TlsErrors());
      }
    }
    for (;;) {
      const int r = SSL_connect(ssl_);
      if (r == 1) return absl::OkStatus();
      const long verified = SSL_get_verify_result(ssl_);
      if (verified != X509_V_OK) {
        ERR_clear_error();
        return Failed(absl::StrCat("the TLS certificate of ", url.HostHeader(),
                                   " is not trusted: ", X509_verify_cert_error_string(verified),
                                   " (--media-ca-file names the CAs trusted)"));
      }
      RETURN_IF_ERROR(WaitTls(r, "the TLS handshake"));
    }
  }

  const absl::Time deadline_;
  int fd_ = -1;
  SSL* ssl_ = nullptr;
};

absl::Status TooLarge(int64_t max_bytes) {
  return Failed(
      absl::StrCat("the image is larger than the ", max_bytes,
                   " bytes its request may still fetch (--media-fetch-max-bytes, for all of a "
                   "request's images)"));
}

// One GET: the body of a 2xx, or (on 3xx) the redirect's Location in `location`.
absl::StatusOr<std::string> GetOnce(const MediaUrl& url, SSL_CTX* tls, absl::Time deadline,
                                    int64_t max_bytes, std::string& location) {
  Connection c(deadline);
  RETURN_IF_ERROR(c.Open(url, tls));
  RETURN_IF_ERROR(
      c.WriteAll(absl::StrCat("GET ", url.target, " HTTP/1.1\r\nHost: ", url.HostHeader(),
                              "\r\nUser-Agent: walsh\r\nAccept: image/*\r\n"
                              "Accept-Encoding: identity\r\nConnection: close\r\n\r\n")));
  std::string raw;
  std::optional<ResponseHead> head;
  for (int interim = 0;;) {
    ASSIGN_OR_RETURN(head, ParseResponseHead(raw));
    if (head && head->status < 200) {  // 1xx: another head follows
      if (++interim > kMaxInterimAnswers) return Failed("more than 8 interim (1xx) answers");
      raw.erase(0, head->size);
      continue;
    }
    if (head) break;
    ASSIGN_OR_RETURN(const size_t n, c.Read(raw, kMaxResponseHeadBytes + 1 -
                                                     std::min(raw.size(), kMaxResponseHeadBytes)));
    if (n == 0) return Failed("the connection closed before the answer's headers");
  }
  if (head->status >= 300 && head->status < 400) {
    auto it = head->headers.find("location");
    if (it == head->headers.end()) {
      return Failed(absl::StrCat("the server answered ", head->status, " without a Location"));
    }
    location = it->second;
    return std::string();
  }
  if (head->status >= 300) return Failed(absl::StrCat("the server answered ", head->status));
  if (auto it = head->headers.find("content-encoding");
      it != head->headers.end() && !absl::EqualsIgnoreCase(it->second, "identity")) {
    return Failed(absl::StrCat("the answer's Content-Encoding \"", it->second, "\" is not taken"));
  }
  bool chunked = false;
  if (auto it = head->headers.find("transfer-encoding"); it != head->headers.end()) {
    if (!absl::EqualsIgnoreCase(it->second, "chunked")) {
      return Failed(
          absl::StrCat("the answer's Transfer-Encoding \"", it->second, "\" is not taken"));
    }
    chunked = true;
  }
  std::optional<int64_t> length;
  if (auto it = head->headers.find("content-length"); it != head->headers.end() && !chunked) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(it->second, &n) || n < 0) return Failed("a malformed Content-Length");
    if (n > max_bytes) return TooLarge(max_bytes);
    length = n;
  }
  raw.erase(0, head->size);
  // A chunked body may carry its framing besides the bytes: a sixteenth more, and a page.
  const size_t cap = static_cast<size_t>(max_bytes) + (chunked ? max_bytes / 16 + 4096 : 0);
  // Whether the body is whole before the server closes: by its length, or (chunked) by its
  // last chunk, since a server may keep the connection open despite Connection: close. The
  // chunks' framing is followed as the bytes arrive, each byte read once.
  size_t chunks_passed = 0;
  absl::Status framing = absl::OkStatus();
  const auto whole = [&] {
    if (length) return raw.size() >= static_cast<size_t>(*length);
    if (!chunked) return false;
    absl::StatusOr<bool> done = ChunkedBodyWhole(raw, &chunks_passed);
    if (!done.ok()) framing = done.status();
    return !done.ok() || *done;
  };
  while (!whole()) {
    if (raw.size() > cap) return TooLarge(max_bytes);
    ASSIGN_OR_RETURN(const size_t n, c.Read(raw, cap + 1 - raw.size()));
    if (n == 0) break;
  }
  RETURN_IF_ERROR(framing);
  if (length && raw.size() < static_cast<size_t>(*length)) {
    return Failed("the connection closed before the whole body came");
  }
  if (length) raw.resize(static_cast<size_t>(*length));
  if (chunked) {
    absl::StatusOr<std::string> body = Dechunk(raw, max_bytes);
    if (absl::IsResourceExhausted(body.status())) return TooLarge(max_bytes);
    return body;
  }
  if (static_cast<int64_t>(raw.size()) > max_bytes) return TooLarge(max_bytes);
  return raw;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MediaFetcher>> MediaFetcher::Create(MediaFetchOptions options) {
  std::unique_ptr<MediaFetcher> f(new MediaFetcher(std::move(options)));
  if (f->options_.allowed_domains.empty()) return f;
  f->tls_ = SSL_CTX_new(TLS_client_method());
  if (f->tls_ == nullptr) return absl::InternalError(TlsErrors());
  SSL_CTX_set_min_proto_version(f->tls_, TLS1_2_VERSION);
  // A TLS peer that closes without close_notify is an error (OpenSSL's default), not the end
  // of a body: one framed by the close could otherwise be cut short by anyone on the path.
  SSL_CTX_set_verify(f->tls_, SSL_VERIFY_PEER, nullptr);
  const int loaded =
      f->options_.ca_file.empty()
          ? SSL_CTX_set_default_verify_paths(f->tls_)
          : SSL_CTX_load_verify_locations(f->tls_, f->options_.ca_file.c_str(), nullptr);
  if (loaded != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--media-ca-file: cannot load ",
        f->options_.ca_file.empty() ? "the system's CAs" : f->options_.ca_file, ": ", TlsErrors()));
  }
  return f;
}

MediaFetcher::MediaFetcher(MediaFetchOptions options) : options_(std::move(options)) {}

MediaFetcher::~MediaFetcher() {
  if (tls_ != nullptr) SSL_CTX_free(tls_);
}

absl::Status MediaFetcher::CheckAllowed(const MediaUrl& url) const {
  if (options_.allowed_domains.empty()) {
    return absl::InvalidArgumentError(
        "http(s) image URLs are not fetched here: the server's --allowed-media-domains names "
        "no host (send the image as a data: URL)");
  }
  // An entry is a host (its URL's scheme's default port) or host:port (that port, any scheme).
  const auto listed = [&](const std::string& entry) {
    return std::find(options_.allowed_domains.begin(), options_.allowed_domains.end(), entry) !=
           options_.allowed_domains.end();
  };
  if (!listed(absl::StrCat(url.HostName(), ":", url.port)) &&
      !(url.default_port() && listed(url.HostName()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the host \"", url.HostHeader(), "\" is not in --allowed-media-domains"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MediaFetcher::Fetch(const MediaUrl& url, int64_t max_bytes,
                                                std::string* detail) const {
  RETURN_IF_ERROR(CheckAllowed(url));
  // Past the allow-list, every failure looks alike to the client, so that fetches cannot map
  // the ports and paths of allowed hosts, or what lies behind them; the reason is the caller's
  // to log.
  absl::StatusOr<std::string> body = FetchAllowed(url, max_bytes);
  if (body.ok()) return body;
  if (detail != nullptr) *detail = std::string(body.status().message());
  return absl::UnavailableError(
      absl::StrCat("could not fetch ", url.Spec(),
                   " (the server's log says why; --media-fetch-max-bytes and "
                   "--media-fetch-timeout-seconds bound a fetch)"));
}

absl::StatusOr<std::string> MediaFetcher::FetchAllowed(const MediaUrl& url,
                                                       int64_t max_bytes) const {
  SigpipeHeld sigpipe_held;
  const absl::Time deadline = absl::Now() + options_.timeout;
  MediaUrl at = url;
  for (int redirects = 0;; ++redirects) {
    std::string location;
    absl::StatusOr<std::string> body =
        GetOnce(at, tls_, deadline, std::min(max_bytes, options_.max_bytes), location);
    if (!body.ok()) {
      if (absl::IsDeadlineExceeded(body.status())) {
        return absl::DeadlineExceededError(absl::StrCat(
            "fetching ", at.Spec(), " took longer than ", absl::FormatDuration(options_.timeout),
            " (--media-fetch-timeout-seconds)"));
      }
      return absl::Status(body.status().code(),
                          absl::StrCat("fetching ", at.Spec(), ": ", body.status().message()));
    }
    if (location.empty()) return body;
    if (redirects == options_.max_redirects) {
      return Failed(absl::StrCat("fetching ", url.Spec(), ": more than ", options_.max_redirects,
                                 " redirects"));
    }
    absl::StatusOr<MediaUrl> next = ResolveLocation(at, location);
    if (!next.ok()) {
      return Failed(absl::StrCat("fetching ", at.Spec(), ": ", next.status().message()));
    }
    if (at.https && !next->https) {
      return Failed(absl::StrCat("fetching ", at.Spec(), ": a redirect from https to http (",
                                 next->Spec(), ") is not followed"));
    }
    if (absl::Status allowed = CheckAllowed(*next); !allowed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("fetching ", at.Spec(), " redirected: ", allowed.message()));
    }
    at = *std::move(next);
  }
}

}  // namespace walsh
