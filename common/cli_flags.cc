#include "common/cli_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace walsh {
namespace {

template <typename T>
absl::Status AtLeast(const char* flag, T value, T min) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be at least ", min, " (got ", value, ")"));
}

}  // namespace

absl::Status FlagAtLeast(const char* flag, int64_t value, int64_t min) {
  return AtLeast(flag, value, min);
}

absl::Status FlagAtLeast(const char* flag, double value, double min) {
  return AtLeast(flag, value, min);
}

absl::Status FlagWithin(const char* flag, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be ", lo, "..", hi, " (got ", value, ")"));
}

namespace {

absl::Status BadValue(const std::string& name, const std::string& value, const char* what) {
  return absl::InvalidArgumentError(absl::StrCat("--", name, ": \"", value, "\" is not ", what));
}

}  // namespace

void FlagSet::String(const std::string& name, std::string* dst, const std::string& help) {
  flags_.push_back({name, help, *dst, false, [dst](const std::string& v) {
                      *dst = v;
                      return absl::OkStatus();
                    }});
}

void FlagSet::Int(const std::string& name, int64_t* dst, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*dst), false, [dst, name](const std::string& v) {
                      return absl::SimpleAtoi(v, dst) ? absl::OkStatus()
                                                      : BadValue(name, v, "an integer");
                    }});
}

void FlagSet::Uint64(const std::string& name, uint64_t* dst, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*dst), false, [dst, name](const std::string& v) {
                      return absl::SimpleAtoi(v, dst) ? absl::OkStatus()
                                                      : BadValue(name, v, "a non-negative integer");
                    }});
}

void FlagSet::Double(const std::string& name, double* dst, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*dst), false, [dst, name](const std::string& v) {
                      return absl::SimpleAtod(v, dst) ? absl::OkStatus()
                                                      : BadValue(name, v, "a number");
                    }});
}

void FlagSet::Bool(const std::string& name, bool* dst, const std::string& help) {
  flags_.push_back({name, help, *dst ? "true" : "false", true, [dst, name](const std::string& v) {
                      return absl::SimpleAtob(v, dst) ? absl::OkStatus()
                                                      : BadValue(name, v, "true or false");
                    }});
}

void FlagSet::StringList(const std::string& name, std::vector<std::string>* dst,
                         const std::string& help) {
  flags_.push_back({name, help + " (repeatable)", "", false, [dst](const std::string& v) {
                      dst->push_back(v);
                      return absl::OkStatus();
                    }});
}

const FlagSet::Flag* FlagSet::Find(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::Status FlagSet::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional_.push_back(argv[i]);
      break;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (name == "help") {
      help_requested_ = true;
      continue;
    }
    const Flag* f = Find(name);
    if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (!has_value) {
      if (f->is_bool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
    }
    RETURN_IF_ERROR(f->set(value));
  }
  return absl::OkStatus();
}

std::string FlagSet::Help() const {
  std::string out = absl::StrCat("usage: ", usage_, "\n\nflags:\n");
  for (const Flag& f : flags_) {
    absl::StrAppend(&out, "  --", f.name, f.is_bool ? "" : " VALUE", "\n      ", f.help,
                    " (default: ", f.default_value.empty() ? "\"\"" : f.default_value, ")\n");
  }
  return out;
}

}  // namespace walsh
