#include "worker/model/prism_contract.h"

#include <regex>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/gguf_keys.h"

namespace walsh {
namespace {

absl::Status Refuse(absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("key '", key, "' ", why));
}

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// docs/format.md §6 "foldable-name rule".
bool IsFoldableName(const std::string& name) {
  static const std::regex kRule(
      "output\\.weight|blk\\.[0-9]+\\.(attn_q|attn_k|attn_v|attn_qkv|attn_gate|attn_output|"
      "ffn_gate|ffn_up|ffn_down|ffn_gate_exps|ffn_up_exps|ffn_down_exps|ffn_gate_up_exps|"
      "ffn_gate_shexp|ffn_up_shexp|ffn_down_shexp|ssm_out|ssm_alpha|ssm_beta)\\.weight");
  return std::regex_match(name, kRule);
}

constexpr const char* kKnownPrismKeys[] = {
    gguf_keys::kPrismHadamardVersion,     gguf_keys::kPrismHadamardTiedOutput,
    gguf_keys::kPrismHadamardBlockSize,   gguf_keys::kPrismHadamardTransform,
    gguf_keys::kPrismHadamardAxis,        gguf_keys::kPrismHadamardSignMode,
    gguf_keys::kPrismHadamardSignWidths,  gguf_keys::kPrismHadamardSignValues,
    gguf_keys::kPrismHadamardWeightNames, gguf_keys::kPrismHadamardInverseWeightNames,
    gguf_keys::kPrismHadamardGdnVGrouped,
};

}  // namespace

const FoldedWeight* PrismContract::FindFolded(const std::string& name) const {
  auto it = folded_index_.find(name);
  return it == folded_index_.end() ? nullptr : &folded[it->second];
}

bool PrismContract::IsInverse(const std::string& name) const {
  for (const std::string& n : inverse) {
    if (n == name) return true;
  }
  return false;
}

const int8_t* PrismContract::SignsFor(int64_t width) const {
  auto it = signs.find(width);
  return it == signs.end() ? nullptr : it->second.data();
}

absl::StatusOr<PrismContract> ParsePrismContract(const GgufFile& file, int64_t gdn_group_count,
                                                 int64_t gdn_value_heads) {
  bool any = false;
  absl::flat_hash_set<std::string> known;
  for (const char* k : kKnownPrismKeys) known.insert(k);
  for (const auto& [key, value] : file.kvs()) {
    if (!absl::StartsWith(key, gguf_keys::kPrismHadamardPrefix)) continue;
    any = true;
    if (!known.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key '", key, "' is not part of the prism.hadamard contract walsh understands"));
    }
  }
  if (!any) {
    return absl::InvalidArgumentError(
        "missing key 'prism.hadamard.version': walsh serves only Prism-folded models, and a "
        "file without the prism.hadamard contract cannot say how its weights were rotated");
  }

  PrismContract c;
  ASSIGN_OR_RETURN(c.version, file.GetInt(gguf_keys::kPrismHadamardVersion, INT64_MIN, INT64_MAX));
  if (c.version != 1 && c.version != 2) {
    return Refuse(gguf_keys::kPrismHadamardVersion,
                  absl::StrCat("is ", c.version, "; only 1 and 2 are understood"));
  }
  if (file.FindKey(gguf_keys::kPrismHadamardTiedOutput) != nullptr) {
    ASSIGN_OR_RETURN(c.tied_output, file.GetBool(gguf_keys::kPrismHadamardTiedOutput));
  }
  if (c.tied_output != (c.version == 2)) {
    return Refuse(gguf_keys::kPrismHadamardTiedOutput,
                  absl::StrCat("is ", c.tied_output ? "true" : "false", " but version is ",
                               c.version, "; version 2 if and only if tied_output"));
  }
  if (c.tied_output && file.FindTensor("output.weight") != nullptr) {
    return Refuse(gguf_keys::kPrismHadamardTiedOutput,
                  "is true but the file has a separate tensor 'output.weight'");
  }
  ASSIGN_OR_RETURN(c.block_size,
                   file.GetInt(gguf_keys::kPrismHadamardBlockSize, INT64_MIN, INT64_MAX));
  if (!IsPowerOfTwo(c.block_size) || c.block_size > (int64_t{1} << 20)) {
    return Refuse(gguf_keys::kPrismHadamardBlockSize,
                  absl::StrCat("is ", c.block_size, ", not a power of two"));
  }
  ASSIGN_OR_RETURN(std::string transform, file.GetString(gguf_keys::kPrismHadamardTransform));
  if (transform != kPrismTransform) {
    return Refuse(
        gguf_keys::kPrismHadamardTransform,
        absl::StrCat("is \"", transform, "\"; only \"", kPrismTransform, "\" is understood"));
  }
  ASSIGN_OR_RETURN(std::string axis, file.GetString(gguf_keys::kPrismHadamardAxis));
  if (axis != kPrismAxis) {
    return Refuse(gguf_keys::kPrismHadamardAxis,
                  absl::StrCat("is \"", axis, "\"; only \"", kPrismAxis, "\" is understood"));
  }
  ASSIGN_OR_RETURN(std::string sign_mode, file.GetString(gguf_keys::kPrismHadamardSignMode));
  if (sign_mode == "explicit") {
    c.sign_mode = PrismSignMode::kExplicit;
  } else if (sign_mode == "identity") {
    c.sign_mode = PrismSignMode::kIdentity;
  } else {
    return Refuse(gguf_keys::kPrismHadamardSignMode,
                  absl::StrCat("is \"", sign_mode, "\"; expected \"explicit\" or \"identity\""));
  }
  if (file.FindKey(gguf_keys::kPrismHadamardGdnVGrouped) != nullptr) {
    ASSIGN_OR_RETURN(c.gdn_v_grouped, file.GetBool(gguf_keys::kPrismHadamardGdnVGrouped));
  }

  if (c.sign_mode == PrismSignMode::kIdentity) {
    for (const char* k :
         {gguf_keys::kPrismHadamardSignWidths, gguf_keys::kPrismHadamardSignValues}) {
      if (file.FindKey(k) != nullptr) {
        return Refuse(k, "is present but sign_mode is \"identity\" (no sign vectors)");
      }
    }
  } else {
    ASSIGN_OR_RETURN(c.sign_widths, file.GetIntArray(gguf_keys::kPrismHadamardSignWidths));
    if (c.sign_widths.empty()) return Refuse(gguf_keys::kPrismHadamardSignWidths, "is empty");
    int64_t total = 0;
    for (int64_t w : c.sign_widths) {
      if (w <= 0 || w % c.block_size != 0 || w > (int64_t{1} << 26)) {
        return Refuse(gguf_keys::kPrismHadamardSignWidths,
                      absl::StrCat("has width ", w, ", not a positive multiple of ", "block_size ",
                                   c.block_size));
      }
      if (c.signs.count(w) != 0) {
        return Refuse(gguf_keys::kPrismHadamardSignWidths,
                      absl::StrCat("lists width ", w, " twice"));
      }
      c.signs[w] = {};
      total += w;
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> values,
                     file.GetIntArray(gguf_keys::kPrismHadamardSignValues));
    if (static_cast<int64_t>(values.size()) != total) {
      return Refuse(
          gguf_keys::kPrismHadamardSignValues,
          absl::StrCat("has ", values.size(), " values, but sign_widths add up to ", total));
    }
    size_t pos = 0;
    for (int64_t w : c.sign_widths) {
      std::vector<int8_t>& s = c.signs[w];
      s.reserve(w);
      for (int64_t i = 0; i < w; ++i, ++pos) {
        if (values[pos] != 1 && values[pos] != -1) {
          return Refuse(gguf_keys::kPrismHadamardSignValues,
                        absl::StrCat("element ", pos, " is ", values[pos], ", not +1 or -1"));
        }
        s.push_back(static_cast<int8_t>(values[pos]));
      }
    }
  }

  ASSIGN_OR_RETURN(std::vector<std::string> names,
                   file.GetStringArray(gguf_keys::kPrismHadamardWeightNames));
  if (names.empty()) return Refuse(gguf_keys::kPrismHadamardWeightNames, "is empty");
  for (const std::string& name : names) {
    if (c.folded_index_.count(name) != 0) {
      return Refuse(gguf_keys::kPrismHadamardWeightNames, absl::StrCat("lists '", name, "' twice"));
    }
    if (!IsFoldableName(name)) {
      return Refuse(gguf_keys::kPrismHadamardWeightNames, absl::StrCat("lists '", name,
                                                                       "', which is not a foldable "
                                                                       "matmul weight name"));
    }
    const GgufTensorInfo* t = file.FindTensor(name);
    if (t == nullptr) {
      return Refuse(gguf_keys::kPrismHadamardWeightNames,
                    absl::StrCat("lists '", name, "', but the file has no such tensor"));
    }
    FoldedWeight fw{name, static_cast<int64_t>(t->ne[0]), false};
    if (t->ne.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("folded tensor '", name, "' has shape ",
                                                     t->ShapeString(), ", expected a matrix"));
    }
    if (fw.width % c.block_size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("folded tensor '", name, "' has input width ne[0] = ", fw.width,
                       ", not a multiple of prism.hadamard.block_size ", c.block_size));
    }
    if (c.sign_mode == PrismSignMode::kExplicit && c.signs.count(fw.width) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("folded tensor '", name, "' has input width ", fw.width,
                       ", for which prism.hadamard.sign_widths has no sign vector"));
    }
    if (c.gdn_v_grouped && absl::EndsWith(name, ".ssm_out.weight")) {
      if (gdn_group_count <= 0 || gdn_value_heads % gdn_group_count != 0 ||
          fw.width % gdn_value_heads != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("folded tensor '", name, "' with prism.hadamard.gdn_v_grouped: width ",
                         fw.width, " cannot be split into ", gdn_value_heads, " value heads over ",
                         gdn_group_count, " key heads"));
      }
      fw.gdn_permute = true;
      c.gdn = {gdn_group_count, gdn_value_heads / gdn_group_count, fw.width / gdn_value_heads};
    }
    c.folded_index_[name] = c.folded.size();
    c.folded.push_back(std::move(fw));
  }

  if (file.FindKey(gguf_keys::kPrismHadamardInverseWeightNames) != nullptr) {
    ASSIGN_OR_RETURN(c.inverse, file.GetStringArray(gguf_keys::kPrismHadamardInverseWeightNames));
    for (const std::string& name : c.inverse) {
      if (name != "token_embd.weight") {
        return Refuse(gguf_keys::kPrismHadamardInverseWeightNames,
                      absl::StrCat("lists '", name, "'; only 'token_embd.weight' is allowed"));
      }
    }
    if (c.inverse.size() > 1)
      return Refuse(gguf_keys::kPrismHadamardInverseWeightNames, "lists 'token_embd.weight' twice");
    if (c.folded_index_.count("token_embd.weight") != 0) {
      return Refuse(gguf_keys::kPrismHadamardInverseWeightNames,
                    "lists 'token_embd.weight', which weight_names lists as well");
    }
    for (const std::string& name : c.inverse) {
      const GgufTensorInfo* t = file.FindTensor(name);
      if (t == nullptr) {
        return Refuse(gguf_keys::kPrismHadamardInverseWeightNames,
                      absl::StrCat("lists '", name, "', but the file has no such tensor"));
      }
      const int64_t width = static_cast<int64_t>(t->ne[0]);
      if (width % c.block_size != 0 ||
          (c.sign_mode == PrismSignMode::kExplicit && c.signs.count(width) == 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("rotated table '", name, "' has width ", width,
                         ", which is not a multiple of block_size or has no sign vector"));
      }
    }
  }
  return c;
}

}  // namespace walsh
