#include "tools/mkmodel/hf_tokenizer.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace walsh {

absl::StatusOr<SyntheticVocab> LoadHfTokenizerJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.contains("model") || !j["model"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a tokenizer.json"));
  }
  const nlohmann::json& model = j["model"];
  if (model.value("type", "") != "BPE" || !model["vocab"].is_object() ||
      !model["merges"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": model is not a byte-level BPE"));
  }
  SyntheticVocab v;
  auto place = [&](int64_t id, const std::string& token, int32_t type) -> absl::Status {
    if (id < 0 || id > (int64_t{1} << 24)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": token id ", id, " out of range"));
    }
    if (static_cast<size_t>(id) >= v.tokens.size()) {
      v.tokens.resize(id + 1);
      v.token_types.resize(id + 1, kTokenUnused);
    }
    v.tokens[id] = token;
    v.token_types[id] = type;
    return absl::OkStatus();
  };
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) return absl::InvalidArgumentError("vocab ids must be integers");
    if (auto s = place(id.get<int64_t>(), token, kTokenNormal); !s.ok()) return s;
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& t : j["added_tokens"]) {
      const int32_t type = t.value("special", false) ? kTokenControl : kTokenUserDefined;
      if (auto s = place(t.value("id", -1), t.value("content", ""), type); !s.ok()) return s;
    }
  }
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.tokens[i].empty()) v.tokens[i] = absl::StrCat("[PAD", i, "]");
  }
  for (const auto& m : model["merges"]) {
    if (m.is_string()) {
      v.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a merge is neither \"a b\" nor [a, b]"));
    }
  }
  auto find = [&](const char* s) -> int64_t {
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      if (v.tokens[i] == s) return static_cast<int64_t>(i);
    }
    return -1;
  };
  v.endoftext_id = find("<|endoftext|>");
  v.im_start_id = find("<|im_start|>");
  v.im_end_id = find("<|im_end|>");
  v.pad_id = v.endoftext_id;
  v.think_id = find("<think>");
  v.end_think_id = find("</think>");
  if (v.endoftext_id < 0 || v.im_end_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no <|endoftext|> / <|im_end|> token"));
  }
  return v;
}

}  // namespace walsh
