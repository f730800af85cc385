#include "common/api_keys.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace walsh {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::Status ApiKeys::Load() {
  std::vector<std::string> keys;
  if (!key_.empty()) keys.push_back(key_);
  if (!file_.empty()) {
    std::ifstream in(file_);
    if (!in)
      return absl::InvalidArgumentError(absl::StrCat("--api-key-file: cannot read '", file_, "'"));
    int line_number = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_number;
      // '#' starts a comment at the line's start or after whitespace ("KEY  # who holds it").
      for (size_t hash = line.find('#'); hash != std::string::npos;
           hash = line.find('#', hash + 1)) {
        if (hash == 0 || absl::ascii_isspace(static_cast<unsigned char>(line[hash - 1]))) {
          line.resize(hash);
          break;
        }
      }
      const std::string k(absl::StripAsciiWhitespace(line));
      if (k.empty()) continue;
      if (std::any_of(k.begin(), k.end(), [](char c) { return absl::ascii_isspace(c); })) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--api-key-file: line ", line_number, " of '", file_,
            "' holds more than one word; a key has no spaces (comments start with '#')"));
      }
      keys.push_back(k);
    }
    if (keys.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--api-key-file: '", file_, "' holds no key"));
    }
  }
  MutexLock l(&mu_);
  keys_ = std::move(keys);
  return absl::OkStatus();
}

bool ApiKeys::enabled() const { return !key_.empty() || !file_.empty(); }

size_t ApiKeys::count() const {
  MutexLock l(&mu_);
  return keys_.size();
}

std::string PresentedKey(absl::string_view value) {
  // The scheme is case-insensitive and followed by one or more spaces (RFC 7235 §2.1).
  if (value.size() <= 7 || !absl::EqualsIgnoreCase(value.substr(0, 7), "bearer ")) return "";
  return std::string(absl::StripLeadingAsciiWhitespace(value.substr(7)));
}

absl::Status ApiKeys::Check(const std::vector<std::string>& authorization) const {
  if (!enabled()) return absl::OkStatus();
  if (authorization.size() != 1) {
    return absl::UnauthenticatedError(
        authorization.empty() ? "authorization: a \"Bearer <api key>\" header is required"
                              : "authorization: send exactly one header, not several");
  }
  const std::string presented = PresentedKey(authorization[0]);
  bool match = false;
  {
    MutexLock l(&mu_);
    for (const std::string& k : keys_) match |= ConstantTimeEquals(presented, k);  // no early exit
  }
  return match ? absl::OkStatus()
               : absl::UnauthenticatedError("authorization: the \"Bearer <api key>\" is not valid");
}

}  // namespace walsh
