#include "openai/http_flags.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace walsh {

void HttpFlags::Register(FlagSet& flags, const std::string& listen_help) {
  flags.String("http-listen", &listen, listen_help);
  flags.Int("http-max-connections", &server.max_connections,
            "HTTP API connections open at once, idle ones included; 16 more may ask only for "
            "/health (anything else: 503 with Retry-After), and beyond those they are closed on "
            "arrival");
  flags.Int("http-max-connections-per-client", &server.max_connections_per_client,
            "HTTP API connections open at once from one client (an address; IPv6 per "
            "--client-ipv6-prefix network); more are closed on arrival");
  flags.Int("client-ipv6-prefix", &client_ipv6_prefix,
            "IPv6 clients count as one per network of this prefix length, 1..128, for the "
            "per-client connection and (gateway) rate limits: one subscriber holds a whole /64");
  flags.Int("http-handler-threads", &server.max_handlers,
            "HTTP API requests answered at once (a thread each); more wait for one");
  flags.Int("http-max-body-bytes", &server.max_body_bytes,
            "largest HTTP API request body; beyond: 413 (gRPC's 4 MiB message limit is the "
            "ceiling)");
  flags.Int("http-idle-timeout-seconds", &idle_seconds,
            "an HTTP connection that starts no request for this long is closed");
  flags.Int("http-header-timeout-seconds", &header_seconds,
            "an HTTP request's headers must arrive within this; beyond: 408");
  flags.Int("http-body-timeout-seconds", &body_seconds,
            "an HTTP request's body must arrive within this after its headers; beyond: 408");
  flags.Int("http-max-buffered-bytes", &server.stream.max_buffered_bytes,
            "event bytes an HTTP stream holds for a client that does not read; while full, the "
            "stream's upstream is not read");
  flags.Int("http-stall-timeout-seconds", &stall_seconds,
            "an HTTP stream whose client reads nothing this long while its buffer is full is "
            "closed and its slot freed");
  flags.String("served-model-name", &served_model_name,
               "the model's id in the HTTP API; empty: the model's general.name");
  flags.Bool("chat-content-special-tokens", &chat_content_special_tokens,
             "recognize special tokens such as <|im_start|> written in HTTP chat messages and "
             "tools (off: they stay text, so a client cannot fake a turn)");
  flags.String("allowed-media-domains", &allowed_media_domains,
               "hosts (exact names, comma-separated, each with :port for a port other than its "
               "scheme's default) whose http(s) image URLs the HTTP API fetches, redirects "
               "included; a name must resolve to a public address (a loopback or private one "
               "only by a literal address here); empty: image URLs must be data: URLs");
  flags.Int("media-fetch-timeout-seconds", &media_fetch_timeout_seconds,
            "longest fetch of one image URL, connecting and redirects included");
  flags.Int("media-fetch-max-bytes", &media_fetch_max_bytes,
            "most image bytes fetched for one request, all its URLs together; beyond: 400 "
            "(gRPC's 4 MiB message limit bounds what reaches the worker)");
  flags.Int("media-fetch-max-images", &media_fetch_max_images,
            "most image URLs in one request; more: 400 before any is fetched");
  flags.String("media-ca-file", &media_ca_file,
               "PEM file of the CAs trusted for https image URLs; empty: the system's");
}

absl::StatusOr<MediaFetchOptions> HttpFlags::Media() const {
  MediaFetchOptions o;
  RETURN_IF_ERROR(FlagWithin("media-fetch-timeout-seconds", media_fetch_timeout_seconds, 1, 600));
  RETURN_IF_ERROR(FlagWithin("media-fetch-max-bytes", media_fetch_max_bytes, 1, int64_t{1} << 30));
  RETURN_IF_ERROR(FlagWithin("media-fetch-max-images", media_fetch_max_images, 1, 256));
  o.max_images = static_cast<int>(media_fetch_max_images);
  o.timeout = absl::Seconds(media_fetch_timeout_seconds);
  o.max_bytes = media_fetch_max_bytes;
  o.ca_file = media_ca_file;
  for (absl::string_view host : absl::StrSplit(allowed_media_domains, ',', absl::SkipEmpty())) {
    host = absl::StripAsciiWhitespace(host);
    // host[:port], the port (if any) the only one allowed; without one, the scheme's default.
    absl::StatusOr<MediaUrl> url = ParseMediaUrl(absl::StrCat("http://", host));
    if (host.empty() || !url.ok() || host.find_first_of("/?#@") != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--allowed-media-domains: \"", host,
                                                     "\" is not a host or host:port (no scheme, "
                                                     "path or query)"));
    }
    const size_t colon = host.rfind(':');
    const bool port_given = colon != absl::string_view::npos && host.back() != ']' &&
                            (host.front() != '[' || colon > host.find(']'));
    o.allowed_domains.push_back(port_given ? absl::StrCat(url->HostName(), ":", url->port)
                                           : url->HostName());
  }
  if (o.allowed_domains.empty() && !media_ca_file.empty()) {
    return absl::InvalidArgumentError("--media-ca-file needs --allowed-media-domains");
  }
  return o;
}

absl::StatusOr<HttpServerOptions> HttpFlags::Options(const ServerTlsFiles& tls) const {
  for (const auto& [flag, value] :
       {std::pair<const char*, int64_t>{"--http-max-connections", server.max_connections},
        {"--http-max-connections-per-client", server.max_connections_per_client},
        {"--http-handler-threads", server.max_handlers},
        {"--http-max-body-bytes", server.max_body_bytes},
        {"--http-idle-timeout-seconds", idle_seconds},
        {"--http-header-timeout-seconds", header_seconds},
        {"--http-body-timeout-seconds", body_seconds},
        {"--http-max-buffered-bytes", server.stream.max_buffered_bytes},
        {"--http-stall-timeout-seconds", stall_seconds}}) {
    if (value < 1) return absl::InvalidArgumentError(absl::StrCat(flag, " must be at least 1"));
  }
  RETURN_IF_ERROR(FlagWithin("client-ipv6-prefix", client_ipv6_prefix, 1, 128));
  if (server.stream.max_buffered_bytes > (1 << 30)) {
    return absl::InvalidArgumentError("--http-max-buffered-bytes must be at most 1 GiB");
  }
  HttpServerOptions o = server;
  o.listen = listen;
  o.ipv6_prefix_bits = static_cast<int>(client_ipv6_prefix);
  o.idle_timeout = std::chrono::seconds(idle_seconds);
  o.header_timeout = std::chrono::seconds(header_seconds);
  o.body_timeout = std::chrono::seconds(body_seconds);
  o.stream.stall_timeout = std::chrono::seconds(stall_seconds);
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert-file and --tls-key-file go together");
  }
  if (!listen.empty() && !tls.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(tls.cert, "--tls-cert-file");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(tls.key, "--tls-key-file");
    if (!key.ok()) return key.status();
    o.tls_cert_pem = *std::move(cert);
    o.tls_key_pem = *std::move(key);
  }
  return o;
}

}  // namespace walsh
