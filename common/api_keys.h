// The API keys a gateway accepts: from --api-key and from --api-key-file (one per line; blank
// lines skipped, '#' at a line's start or after whitespace starts a comment), reloaded from the
// file on SIGHUP so keys rotate without a restart and never appear in `ps`. A call is
// authorized by exactly one `authorization: Bearer KEY` header (the scheme in any case) whose
// key is one of them, compared in constant time.
#ifndef WALSH_COMMON_API_KEYS_H_
#define WALSH_COMMON_API_KEYS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"

namespace walsh {

// Equal in time that depends only on the lengths, not on where the strings first differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The key an authorization header's value presents: after the "Bearer" scheme, in any case,
// and the spaces after it (RFC 7235 §2.1); empty when it presents none. Every spelling of one
// key gives the same string, so what is keyed on it (the per-client limits) counts it once.
std::string PresentedKey(absl::string_view authorization);

class ApiKeys {
 public:
  ApiKeys(std::string key, std::string file) : key_(std::move(key)), file_(std::move(file)) {}

  // Reads the file again (and at start); on error the keys in force stay.
  absl::Status Load() ABSL_LOCKS_EXCLUDED(mu_);
  bool enabled() const;
  size_t count() const ABSL_LOCKS_EXCLUDED(mu_);
  // The values of a call's authorization headers (gRPC metadata or HTTP): OK, or
  // UNAUTHENTICATED saying what is wrong (missing, repeated or unknown key).
  absl::Status Check(const std::vector<std::string>& authorization) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string key_, file_;
  mutable Mutex mu_;
  std::vector<std::string> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walsh

#endif  // WALSH_COMMON_API_KEYS_H_
