#include "openai/media_url.h"

#include <arpa/inet.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

absl::Status Bad(absl::string_view why) { return absl::InvalidArgumentError(why); }

bool HostChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_'; }

// RFC 3986's path and query characters, percent escapes included; nothing else goes on the wire.
bool TargetChar(char c) {
  return absl::ascii_isalnum(c) ||
         absl::string_view("-._~!$&'()*+,;=:@/?%").find(c) != absl::string_view::npos;
}

}  // namespace

bool MediaUrl::ip_literal() const {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

std::string MediaUrl::HostName() const {
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host;
}

std::string MediaUrl::HostHeader() const {
  std::string h = HostName();
  if (!default_port()) absl::StrAppend(&h, ":", port);
  return h;
}

std::string MediaUrl::Spec() const {
  return absl::StrCat(https ? "https://" : "http://", HostHeader(), target);
}

bool IsHttpUrl(absl::string_view url) {
  return absl::StartsWithIgnoreCase(url, "http://") || absl::StartsWithIgnoreCase(url, "https://");
}

absl::StatusOr<MediaUrl> ParseMediaUrl(absl::string_view url) {
  MediaUrl u;
  if (absl::StartsWithIgnoreCase(url, "https://")) {
    u.https = true;
    url.remove_prefix(8);
  } else if (absl::StartsWithIgnoreCase(url, "http://")) {
    url.remove_prefix(7);
  } else {
    return Bad("only http and https URLs are fetched");
  }
  if (const size_t hash = url.find('#'); hash != absl::string_view::npos) url = url.substr(0, hash);
  const size_t end = url.find_first_of("/?");
  absl::string_view authority = url.substr(0, end);
  const absl::string_view target = end == absl::string_view::npos ? "" : url.substr(end);
  if (authority.find('@') != absl::string_view::npos) return Bad("a URL with user info is refused");
  absl::string_view port;
  if (absl::StartsWith(authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return Bad("an IPv6 host without its ']'");
    u.host = std::string(authority.substr(1, close - 1));
    unsigned char buf[16];
    if (inet_pton(AF_INET6, u.host.c_str(), buf) != 1) return Bad("a bracketed host is not IPv6");
    absl::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return Bad("characters after the IPv6 host");
      port = rest.substr(1);
    }
  } else {
    const size_t colon = authority.find(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) port = authority.substr(colon + 1);
    for (char c : u.host) {
      if (!HostChar(c)) return Bad(absl::StrCat("the host has a character not allowed in one"));
    }
  }
  if (u.host.empty()) return Bad("the URL names no host");
  absl::AsciiStrToLower(&u.host);
  u.port = u.https ? 443 : 80;
  if (!port.empty() || authority.back() == ':') {
    int p = 0;
    if (!absl::SimpleAtoi(port, &p) || p < 1 || p > 65535 ||
        port.find_first_not_of("0123456789") != absl::string_view::npos) {
      return Bad("the port is not a number in [1, 65535]");
    }
    u.port = p;
  }
  for (char c : target) {
    if (!TargetChar(c)) return Bad("the path has a character that must be percent-encoded");
  }
  u.target = target.empty() || target[0] == '?' ? absl::StrCat("/", target) : std::string(target);
  return u;
}

absl::StatusOr<MediaUrl> ResolveLocation(const MediaUrl& base, absl::string_view location) {
  if (IsHttpUrl(location)) return ParseMediaUrl(location);
  if (!absl::StartsWith(location, "/") || absl::StartsWith(location, "//")) {
    return Bad("a redirect's Location is neither an http(s) URL nor an absolute path");
  }
  return ParseMediaUrl(
      absl::StrCat(base.https ? "https://" : "http://", base.HostHeader(), location));
}

}  // namespace walsh
