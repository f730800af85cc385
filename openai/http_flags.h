// The HTTP face's flags, the same in walsh-gateway and walsh-worker (docs/openai.md): where it
// listens, its connection caps, deadlines and stream buffers (§Connections), the model's name
// and whether chat content may write special tokens.
#ifndef WALSH_OPENAI_HTTP_FLAGS_H_
#define WALSH_OPENAI_HTTP_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/cli_flags.h"
#include "common/tls_credentials.h"
#include "openai/http_server.h"
#include "openai/media_fetcher.h"

namespace walsh {

struct HttpFlags {
  std::string listen;        // empty: no HTTP face
  HttpServerOptions server;  // the counts and byte sizes bind to it directly
  int64_t idle_seconds = 60, header_seconds = 10, body_seconds = 30, stall_seconds = 30;
  int64_t client_ipv6_prefix = 64;  // also the gateway's per-client rate limits' grouping
  std::string served_model_name;    // empty: the model's general.name
  bool chat_content_special_tokens = false;
  // Images by http(s) URL (docs/openai.md §Images): fetched only from these hosts.
  std::string allowed_media_domains;  // comma-separated; empty: none
  int64_t media_fetch_timeout_seconds = 10;
  int64_t media_fetch_max_bytes = int64_t{4} << 20;
  int64_t media_fetch_max_images = 4;
  std::string media_ca_file;

  void Register(FlagSet& flags, const std::string& listen_help);
  // Every flag's range checked (the error names it) and the certificate read: HTTPS when `tls`
  // has one.
  absl::StatusOr<HttpServerOptions> Options(const ServerTlsFiles& tls) const;
  // The media flags checked, each error naming its flag.
  absl::StatusOr<MediaFetchOptions> Media() const;
};

}  // namespace walsh

#endif  // WALSH_OPENAI_HTTP_FLAGS_H_
