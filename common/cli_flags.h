// Command-line flags with the dashed names our tools document (--dense-out, --max-tokens):
// `--name value`, `--name=value`, bare `--name` for booleans, and positional arguments.
#ifndef WALSH_COMMON_CLI_FLAGS_H_
#define WALSH_COMMON_CLI_FLAGS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/request_ranges.h"

namespace walsh {

// OK when `value` >= `min`, else INVALID_ARGUMENT "--flag must be at least MIN (got VALUE)".
absl::Status FlagAtLeast(const char* flag, int64_t value, int64_t min);
absl::Status FlagAtLeast(const char* flag, double value, double min);
// OK when `value` is in [lo, hi], else INVALID_ARGUMENT "--flag must be LO..HI (got VALUE)".
absl::Status FlagWithin(const char* flag, int64_t value, int64_t lo, int64_t hi);
// OK when `range` holds `value`, else INVALID_ARGUMENT "--flag must be in [LO, HI] (got VALUE)".
template <typename T>
absl::Status FlagInRange(const char* flag, T value, const ValueRange<T>& range) {
  if (range.Contains(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be in ", range.ToString(), " (got ", value, ")"));
}

class FlagSet {
 public:
  explicit FlagSet(std::string usage) : usage_(std::move(usage)) {}

  void String(const std::string& name, std::string* dst, const std::string& help);
  void Int(const std::string& name, int64_t* dst, const std::string& help);
  void Uint64(const std::string& name, uint64_t* dst, const std::string& help);
  void Double(const std::string& name, double* dst, const std::string& help);
  void Bool(const std::string& name, bool* dst, const std::string& help);
  // Repeatable: each occurrence appends its value.
  void StringList(const std::string& name, std::vector<std::string>* dst, const std::string& help);

  // Parses argv[1..]; an unknown flag or a bad value is an error that names the flag.
  absl::Status Parse(int argc, char** argv);
  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_value;
    bool is_bool;
    std::function<absl::Status(const std::string&)> set;
  };
  const Flag* Find(const std::string& name) const;

  std::string usage_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

}  // namespace walsh

#endif  // WALSH_COMMON_CLI_FLAGS_H_
