#include "tools/inspect/model_summary.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/weight_format.h"
#include "nlohmann/json.hpp"
#include "worker/engine/engine_options.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_keys.h"

namespace walsh {
namespace {

struct TypeTotals {
  int64_t count = 0;
  uint64_t elements = 0;
  uint64_t bytes = 0;
};

struct Totals {
  std::map<std::string, TypeTotals> by_type;
  uint64_t ternary_elements = 0, ternary_bytes = 0, all_elements = 0, all_bytes = 0;
  std::map<int64_t, int64_t> folded_by_width;
  int64_t attention_layers = 0;
};

Totals Count(const ModelFile& m) {
  Totals t;
  for (const GgufTensorInfo& info : m.gguf->tensors()) {
    TypeTotals& tt = t.by_type[GgmlTypeName(info.type)];
    ++tt.count;
    tt.elements += info.n_elements;
    tt.bytes += info.n_bytes;
    t.all_elements += info.n_elements;
    t.all_bytes += info.n_bytes;
    if (FindTernaryFormat(info.type) != nullptr) {
      t.ternary_elements += info.n_elements;
      t.ternary_bytes += info.n_bytes;
    }
  }
  for (const FoldedWeight& f : m.contract.folded) ++t.folded_by_width[f.width];
  for (int64_t i = 0; i < m.config.block_count; ++i)
    t.attention_layers += m.config.IsFullAttention(i);
  return t;
}

double Bits(uint64_t bytes, uint64_t elements) {
  return elements == 0 ? 0.0 : 8.0 * static_cast<double>(bytes) / static_cast<double>(elements);
}

std::string TokenizerLine(const GgufFile& g) {
  const GgufValue* tokens = g.FindKey(gguf_keys::kTokenizerGgmlTokens);
  if (tokens == nullptr) return "none";
  auto str = [&](const char* key) {
    const GgufValue* v = g.FindKey(key);
    return v != nullptr && v->type() == GgufType::kString ? v->str() : std::string("?");
  };
  const GgufValue* merges = g.FindKey(gguf_keys::kTokenizerGgmlMerges);
  return absl::StrCat(str(gguf_keys::kTokenizerGgmlModel), " / pre ",
                      str(gguf_keys::kTokenizerGgmlPre), ", ", tokens->elems().size(), " tokens, ",
                      merges != nullptr ? merges->elems().size() : 0, " merges");
}

constexpr KvCacheDtype kKvDtypes[] = {KvCacheDtype::kFp16, KvCacheDtype::kQ8, KvCacheDtype::kQ4};

// K and V of one token in every attention layer (q8 and q4 need head widths of whole 32s).
int64_t KvBytesPerToken(const Qwen35Config& c, int64_t attention_layers, KvCacheDtype d) {
  return attention_layers * 2 * KvBytes(d, c.head_count_kv * c.key_length);
}

}  // namespace

std::string ModelSummaryText(const ModelFile& m) {
  const Qwen35Config& c = m.config;
  const PrismContract& p = m.contract;
  const Totals t = Count(m);
  std::string s;
  absl::StrAppendFormat(&s,
                        "file          GGUF v%d, %d keys, %d tensors, %d bytes (alignment %d)\n",
                        m.gguf->version(), m.gguf->kvs().size(), m.gguf->tensors().size(),
                        m.gguf->file_size(), m.gguf->alignment());
  absl::StrAppendFormat(&s,
                        "architecture  qwen35: %d layers (%d Gated DeltaNet, %d full attention)\n",
                        c.block_count, c.block_count - t.attention_layers, t.attention_layers);
  absl::StrAppendFormat(&s, "dimensions    hidden %d, ffn %d, vocab %d, context %d\n",
                        c.embedding_length, c.feed_forward_length, c.vocab_size, c.context_length);
  absl::StrAppendFormat(
      &s, "attention     %d query heads / %d kv heads x %d, rope %d dims base %g\n", c.head_count,
      c.head_count_kv, c.key_length, c.rope_dimension_count, c.rope_freq_base);
  std::vector<std::string> kv;
  for (const KvCacheDtype d : kKvDtypes) {
    const int64_t per_token = KvBytesPerToken(c, t.attention_layers, d);
    kv.push_back(absl::StrFormat("%s %d B (%.2f GiB at context %d)", KvCacheDtypeName(d), per_token,
                                 per_token * c.context_length / 1073741824.0, c.context_length));
  }
  absl::StrAppendFormat(&s, "kv per token  %s\n", absl::StrJoin(kv, ", "));
  absl::StrAppendFormat(&s, "gated deltanet %d key heads / %d value heads x %d, conv %d\n",
                        c.ssm_group_count, c.ssm_time_step_rank, c.ssm_state_size,
                        c.ssm_conv_kernel);
  std::vector<std::string> widths;
  for (const auto& [w, n] : t.folded_by_width) widths.push_back(absl::StrCat(n, " at ", w));
  absl::StrAppendFormat(
      &s,
      "contract      prism.hadamard v%d, block %d, signs %s [%s], %d folded (%s), inverse [%s]%s\n",
      p.version, p.block_size, p.sign_mode == PrismSignMode::kExplicit ? "explicit" : "identity",
      absl::StrJoin(p.sign_widths, ", "), p.folded.size(), absl::StrJoin(widths, ", "),
      absl::StrJoin(p.inverse, ", "),
      p.gdn_v_grouped ? absl::StrFormat(", GDN permute %dx%dx%d", p.gdn.n_k, p.gdn.rep, p.gdn.hd)
                      : std::string());
  absl::StrAppendFormat(&s, "tokenizer     %s\n", TokenizerLine(*m.gguf));
  absl::StrAppend(&s, "tensors       type      count        elements           bytes\n");
  for (const auto& [name, tt] : t.by_type) {
    absl::StrAppendFormat(&s, "              %-8s %6d %15d %15d\n", name, tt.count, tt.elements,
                          tt.bytes);
  }
  absl::StrAppendFormat(&s, "bits/weight   %.4f over ternary tensors, %.4f over all tensors\n",
                        Bits(t.ternary_bytes, t.ternary_elements),
                        Bits(t.all_bytes, t.all_elements));
  return s;
}

std::string ModelSummaryJson(const ModelFile& m) {
  const Qwen35Config& c = m.config;
  const PrismContract& p = m.contract;
  const Totals t = Count(m);
  nlohmann::json j;
  j["gguf"] = {{"version", m.gguf->version()},
               {"keys", m.gguf->kvs().size()},
               {"tensors", m.gguf->tensors().size()},
               {"file_bytes", m.gguf->file_size()},
               {"alignment", m.gguf->alignment()}};
  j["architecture"] = "qwen35";
  j["config"] = {{"block_count", c.block_count},
                 {"attention_layers", t.attention_layers},
                 {"embedding_length", c.embedding_length},
                 {"feed_forward_length", c.feed_forward_length},
                 {"vocab_size", c.vocab_size},
                 {"context_length", c.context_length},
                 {"head_count", c.head_count},
                 {"head_count_kv", c.head_count_kv},
                 {"key_length", c.key_length},
                 {"rope_dimension_count", c.rope_dimension_count},
                 {"rope_freq_base", c.rope_freq_base},
                 {"ssm_group_count", c.ssm_group_count},
                 {"ssm_time_step_rank", c.ssm_time_step_rank},
                 {"ssm_state_size", c.ssm_state_size}};
  for (const KvCacheDtype d : kKvDtypes) {
    const int64_t per_token = KvBytesPerToken(c, t.attention_layers, d);
    j["kv_cache"][KvCacheDtypeName(d)] = {{"bytes_per_token", per_token},
                                          {"context_bytes", per_token * c.context_length}};
  }
  nlohmann::json folded_by_width = nlohmann::json::object();
  for (const auto& [w, n] : t.folded_by_width) folded_by_width[std::to_string(w)] = n;
  j["contract"] = {{"version", p.version},
                   {"block_size", p.block_size},
                   {"sign_mode", p.sign_mode == PrismSignMode::kExplicit ? "explicit" : "identity"},
                   {"sign_widths", p.sign_widths},
                   {"folded", p.folded.size()},
                   {"folded_by_width", folded_by_width},
                   {"inverse", p.inverse},
                   {"gdn_v_grouped", p.gdn_v_grouped}};
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [name, tt] : t.by_type) {
    types[name] = {{"count", tt.count}, {"elements", tt.elements}, {"bytes", tt.bytes}};
  }
  j["tensor_types"] = types;
  j["bits_per_weight"] = {{"ternary", Bits(t.ternary_bytes, t.ternary_elements)},
                          {"all", Bits(t.all_bytes, t.all_elements)}};
  return j.dump(2) + "\n";
}

}  // namespace walsh
