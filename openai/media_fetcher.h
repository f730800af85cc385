// Fetches the images an OpenAI request names by http(s) URL (docs/openai.md §Images), for hosts
// on the server's --allowed-media-domains only (host, or host:port): without that flag nothing
// is fetched. A name must resolve to a public address (loopback, private and link-local ones
// only by a literal address on the list), and the address checked is the one dialed. One GET
// per image over a fresh connection, HTTPS verified against the trusted CAs and the host's
// name, redirects followed only to allowed hosts, the whole fetch bounded in time and bytes.
#ifndef WALSH_OPENAI_MEDIA_FETCHER_H_
#define WALSH_OPENAI_MEDIA_FETCHER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "openai/media_url.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace walsh {

struct MediaFetchOptions {
  // Exact host names, lower case (IPv6 bracketed), each alone (a URL's scheme's default port)
  // or as host:port (that port only, whatever the scheme); empty: none.
  std::vector<std::string> allowed_domains;
  absl::Duration timeout = absl::Seconds(10);  // one image's fetch, redirects included
  int64_t max_bytes = int64_t{4} << 20;        // the bodies of one request's images, together
  int max_images = 4;                          // image URLs in one request
  int max_redirects = 3;
  std::string ca_file;  // the CAs HTTPS trusts (PEM); empty: the system's
};

class MediaFetcher {
 public:
  // Fails naming --media-ca-file when it cannot be read.
  static absl::StatusOr<std::unique_ptr<MediaFetcher>> Create(MediaFetchOptions options);
  ~MediaFetcher();
  MediaFetcher(const MediaFetcher&) = delete;
  MediaFetcher& operator=(const MediaFetcher&) = delete;

  // The body of a 2xx answer to GET `url`. INVALID_ARGUMENT naming --allowed-media-domains for
  // a host and port not on it (nothing is fetched); past that, any failure (the resolved
  // address, the connection, the certificate, the status, the framing, the size, the time, a
  // redirect) is the same UNAVAILABLE "could not fetch URL", with the reason, naming the flag
  // that would change it, in `detail` (optional) for the log.
  // `max_bytes`: what the request may still fetch (at most options().max_bytes).
  absl::StatusOr<std::string> Fetch(const MediaUrl& url, int64_t max_bytes,
                                    std::string* detail = nullptr) const;

  const MediaFetchOptions& options() const { return options_; }

 private:
  explicit MediaFetcher(MediaFetchOptions options);
  absl::Status CheckAllowed(const MediaUrl& url) const;
  // Fetch past the first allow-list check, failures as they are.
  absl::StatusOr<std::string> FetchAllowed(const MediaUrl& url, int64_t max_bytes) const;

  const MediaFetchOptions options_;
  SSL_CTX* tls_ = nullptr;  // owned
};

}  // namespace walsh

#endif  // WALSH_OPENAI_MEDIA_FETCHER_H_
