#include "worker/engine/detokenizer.h"

#include "worker/model/utf8.h"

namespace walsh {

std::string StreamingDetokenizer::Add(int32_t id) {
  if (!tokenizer_.IsControl(id)) pending_ += tokenizer_.TokenBytes(id);
  const size_t n = CompleteUtf8Prefix(pending_);
  std::string out = SanitizeUtf8(absl::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out = SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace walsh
