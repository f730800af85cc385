#include "gateway/api_keys.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

// Equal in time that depends only on the lengths, not on where the strings first differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::Status ApiKeys::Load() {
  std::vector<std::string> keys;
  if (!key_.empty()) keys.push_back(key_);
  if (!file_.empty()) {
    std::ifstream in(file_);
    if (!in)
      return absl::InvalidArgumentError(absl::StrCat("--api-key-file: cannot read '", file_, "'"));
    for (std::string line; std::getline(in, line);) {
      const std::string k(absl::StripAsciiWhitespace(line));
      if (!k.empty() && k[0] != '#') keys.push_back(k);
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

grpc::Status ApiKeys::Check(const grpc::ServerContextBase& context) const {
  if (!enabled()) return grpc::Status::OK;
  std::vector<std::string> values;
  const auto range = context.client_metadata().equal_range("authorization");
  for (auto it = range.first; it != range.second; ++it) {
    values.emplace_back(it->second.data(), it->second.size());
  }
  return CheckValues(values);
}

grpc::Status ApiKeys::CheckValues(const std::vector<std::string>& authorization) const {
  if (!enabled()) return grpc::Status::OK;
  if (authorization.size() != 1) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        authorization.empty()
                            ? "authorization: a \"Bearer <api key>\" header is required"
                            : "authorization: send exactly one header, not several");
  }
  const std::string& value = authorization[0];
  const std::string presented = absl::StartsWith(value, "Bearer ") ? value.substr(7) : "";
  bool match = false;
  {
    MutexLock l(&mu_);
    for (const std::string& k : keys_) match |= ConstantTimeEquals(presented, k);  // no early exit
  }
  return match ? grpc::Status::OK
               : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                              "authorization: the \"Bearer <api key>\" is not valid");
}

}  // namespace walsh
