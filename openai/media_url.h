// An image's http(s) URL in an OpenAI request (docs/openai.md §Images): the scheme, the host, the
// port and the request target. The fragment is dropped; user info, other schemes, spaces and
// control characters are refused, so what is fetched is exactly what the host check saw.
#ifndef WALSH_OPENAI_MEDIA_URL_H_
#define WALSH_OPENAI_MEDIA_URL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walsh {

struct MediaUrl {
  bool https = false;
  std::string host;    // lower case; an IPv6 literal without its brackets
  int port = 0;        // 80 or 443 when the URL names none
  std::string target;  // path and query; "/" at least

  bool ip_literal() const;
  std::string HostName() const;    // host, bracketed if IPv6
  std::string HostHeader() const;  // HostName, with the port if not the default
  bool default_port() const { return port == (https ? 443 : 80); }
  std::string Spec() const;  // the URL again, normalized
};

// Whether `url` names an http(s) resource (any case), as opposed to data: and the rest.
bool IsHttpUrl(absl::string_view url);

// INVALID_ARGUMENT saying what is wrong with the URL.
absl::StatusOr<MediaUrl> ParseMediaUrl(absl::string_view url);

// A redirect's Location against the URL that answered: an absolute URL, or an absolute path on
// the same origin.
absl::StatusOr<MediaUrl> ResolveLocation(const MediaUrl& base, absl::string_view location);

}  // namespace walsh

#endif  // WALSH_OPENAI_MEDIA_URL_H_
