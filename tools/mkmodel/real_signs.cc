#include "tools/mkmodel/real_signs.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace walsh {

std::string DefaultReleasedHadamardPath() {
  // WALSH_SOURCE_DIR in the environment: a source tree elsewhere than the build's (binaries
  // carried to another machine).
  const char* root = std::getenv("WALSH_SOURCE_DIR");
  return std::string(root != nullptr ? root : WALSH_SOURCE_DIR) +
         "/tests/data/prism/ternary_bonsai_hadamard.json";
}

absl::StatusOr<ReleasedHadamard> LoadReleasedHadamard(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  auto field = [&](const char* name, auto check) -> absl::StatusOr<const nlohmann::json*> {
    auto it = j.find(name);
    if (it == j.end() || !check(*it)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": field '", name, "' missing or mistyped"));
    }
    return &*it;
  };
  ReleasedHadamard r;
  auto is_int = [](const nlohmann::json& v) { return v.is_number_integer(); };
  auto is_array = [](const nlohmann::json& v) { return v.is_array(); };
  auto is_string = [](const nlohmann::json& v) { return v.is_string(); };
  auto is_bool = [](const nlohmann::json& v) { return v.is_boolean(); };

  absl::StatusOr<const nlohmann::json*> f = field("block_size", is_int);
  if (!f.ok()) return f.status();
  r.block_size = (*f)->get<int64_t>();
  if (!(f = field("gdn_v_grouped", is_bool)).ok()) return f.status();
  r.gdn_v_grouped = (*f)->get<bool>();
  if (!(f = field("sign_widths", is_array)).ok()) return f.status();
  for (const auto& w : **f) {
    if (!w.is_number_integer()) return absl::InvalidArgumentError("sign_widths: not integers");
    r.sign_widths.push_back(w.get<int64_t>());
  }
  if (!(f = field("sign_values_bits", is_string)).ok()) return f.status();
  const std::string hex = (*f)->get<std::string>();
  std::vector<uint8_t> bits;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bits.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  size_t bit = 0;
  for (int64_t w : r.sign_widths) {
    std::vector<int8_t>& s = r.signs[w];
    for (int64_t i = 0; i < w; ++i, ++bit) {
      if (bit / 8 >= bits.size()) return absl::InvalidArgumentError("sign_values_bits too short");
      s.push_back((bits[bit / 8] >> (bit % 8)) & 1 ? 1 : -1);
    }
  }
  for (const char* name : {"weight_names", "inverse_weight_names"}) {
    if (!(f = field(name, is_array)).ok()) return f.status();
    auto& out = std::string(name) == "weight_names" ? r.weight_names : r.inverse_weight_names;
    for (const auto& n : **f) {
      if (!n.is_string()) return absl::InvalidArgumentError(absl::StrCat(name, ": not strings"));
      out.push_back(n.get<std::string>());
    }
  }
  return r;
}

}  // namespace walsh
