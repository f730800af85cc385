#include "worker/model/qwen35_config.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/weight_format.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_keys.h"
#include "worker/model/gguf_writer.h"
#include "worker/model/tensor_table_check.h"

namespace walsh {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;

// The qwen35.* keys walsh understands; any other is refused so nothing changes the math unseen.
constexpr const char* kKnownQwen35Keys[] = {
    gguf_keys::kQwen35BlockCount,
    gguf_keys::kQwen35ContextLength,
    gguf_keys::kQwen35EmbeddingLength,
    gguf_keys::kQwen35FeedForwardLength,
    gguf_keys::kQwen35AttentionHeadCount,
    gguf_keys::kQwen35AttentionHeadCountKv,
    gguf_keys::kQwen35AttentionKeyLength,
    gguf_keys::kQwen35AttentionValueLength,
    gguf_keys::kQwen35AttentionLayerNormRmsEpsilon,
    gguf_keys::kQwen35RopeDimensionCount,
    gguf_keys::kQwen35RopeDimensionSections,
    gguf_keys::kQwen35RopeFreqBase,
    gguf_keys::kQwen35FullAttentionInterval,
    gguf_keys::kQwen35SsmConvKernel,
    gguf_keys::kQwen35SsmStateSize,
    gguf_keys::kQwen35SsmGroupCount,
    gguf_keys::kQwen35SsmTimeStepRank,
    gguf_keys::kQwen35SsmInnerSize,
};

}  // namespace

absl::StatusOr<Qwen35Config> ParseQwen35Config(const GgufFile& file) {
  ASSIGN_OR_RETURN(std::string arch, file.GetString(gguf_keys::kGeneralArchitecture));
  if (arch != "qwen35") {
    return GgufKeyError(gguf_keys::kGeneralArchitecture,
                        absl::StrCat("is \"", arch, "\"; walsh serves only \"qwen35\""));
  }
  absl::flat_hash_set<std::string> known;
  for (const char* k : kKnownQwen35Keys) known.insert(k);
  for (const auto& [key, value] : file.kvs()) {
    if (absl::StartsWith(key, gguf_keys::kQwen35Prefix) && !known.contains(key)) {
      return GgufKeyError(
          key, absl::StrCat("(value ", value.DebugString(),
                            ") is not part of the qwen35 architecture walsh implements"));
    }
  }

  Qwen35Config c;
  ASSIGN_OR_RETURN(c.block_count, file.GetInt(gguf_keys::kQwen35BlockCount, 1, 4096));
  ASSIGN_OR_RETURN(c.context_length,
                   file.GetInt(gguf_keys::kQwen35ContextLength, 1, int64_t{1} << 30));
  ASSIGN_OR_RETURN(c.embedding_length, file.GetInt(gguf_keys::kQwen35EmbeddingLength, 1, kMaxDim));
  ASSIGN_OR_RETURN(c.feed_forward_length,
                   file.GetInt(gguf_keys::kQwen35FeedForwardLength, 1, kMaxDim));
  ASSIGN_OR_RETURN(c.head_count, file.GetInt(gguf_keys::kQwen35AttentionHeadCount, 1, 4096));
  ASSIGN_OR_RETURN(c.head_count_kv, file.GetInt(gguf_keys::kQwen35AttentionHeadCountKv, 1, 4096));
  ASSIGN_OR_RETURN(c.key_length, file.GetInt(gguf_keys::kQwen35AttentionKeyLength, 1, 65536));
  ASSIGN_OR_RETURN(c.value_length, file.GetInt(gguf_keys::kQwen35AttentionValueLength, 1, 65536));
  ASSIGN_OR_RETURN(double eps, file.GetFloat(gguf_keys::kQwen35AttentionLayerNormRmsEpsilon));
  c.rms_epsilon = static_cast<float>(eps);
  ASSIGN_OR_RETURN(c.rope_dimension_count,
                   file.GetInt(gguf_keys::kQwen35RopeDimensionCount, 2, 65536));
  ASSIGN_OR_RETURN(std::vector<int64_t> sections,
                   file.GetIntArray(gguf_keys::kQwen35RopeDimensionSections));
  ASSIGN_OR_RETURN(double freq_base, file.GetFloat(gguf_keys::kQwen35RopeFreqBase));
  c.rope_freq_base = static_cast<float>(freq_base);
  ASSIGN_OR_RETURN(c.full_attention_interval,
                   file.GetInt(gguf_keys::kQwen35FullAttentionInterval, 1, 4096));
  ASSIGN_OR_RETURN(c.ssm_conv_kernel, file.GetInt(gguf_keys::kQwen35SsmConvKernel, 1, 64));
  ASSIGN_OR_RETURN(c.ssm_state_size, file.GetInt(gguf_keys::kQwen35SsmStateSize, 1, 65536));
  ASSIGN_OR_RETURN(c.ssm_group_count, file.GetInt(gguf_keys::kQwen35SsmGroupCount, 1, 4096));
  ASSIGN_OR_RETURN(c.ssm_time_step_rank, file.GetInt(gguf_keys::kQwen35SsmTimeStepRank, 1, 4096));
  ASSIGN_OR_RETURN(c.ssm_inner_size, file.GetInt(gguf_keys::kQwen35SsmInnerSize, 1, kMaxDim));

  if (!(eps > 0 && eps < 1)) {
    return GgufKeyError(gguf_keys::kQwen35AttentionLayerNormRmsEpsilon,
                        absl::StrCat("is ", eps, ", not in (0, 1)"));
  }
  if (!(freq_base > 1)) {
    return GgufKeyError(gguf_keys::kQwen35RopeFreqBase,
                        absl::StrCat("is ", freq_base, ", not > 1"));
  }
  if (c.head_count % c.head_count_kv != 0) {
    return GgufKeyError(
        gguf_keys::kQwen35AttentionHeadCountKv,
        absl::StrCat("is ", c.head_count_kv, ", which does not divide head_count ", c.head_count));
  }
  if (c.key_length != c.value_length) {
    return GgufKeyError(gguf_keys::kQwen35AttentionValueLength,
                        absl::StrCat("is ", c.value_length,
                                     ", but walsh needs it equal to key_length ", c.key_length));
  }
  if (c.rope_dimension_count % 2 != 0 || c.rope_dimension_count > c.key_length) {
    return GgufKeyError(gguf_keys::kQwen35RopeDimensionCount,
                        absl::StrCat("is ", c.rope_dimension_count,
                                     ", not an even number <= key_length ", c.key_length));
  }
  if (sections.size() != 4) {
    return GgufKeyError(gguf_keys::kQwen35RopeDimensionSections,
                        absl::StrCat("has ", sections.size(), " entries, expected 4"));
  }
  int64_t section_sum = 0;
  for (size_t i = 0; i < 4; ++i) {
    if (sections[i] < 0)
      return GgufKeyError(gguf_keys::kQwen35RopeDimensionSections, "has a negative entry");
    c.rope_sections[i] = sections[i];
    section_sum += sections[i];
  }
  if (section_sum != c.rope_dimension_count / 2) {
    return GgufKeyError(
        gguf_keys::kQwen35RopeDimensionSections,
        absl::StrCat("[", absl::StrJoin(sections, ", "), "] sum to ", section_sum,
                     ", expected rope.dimension_count / 2 = ", c.rope_dimension_count / 2));
  }
  if (c.ssm_time_step_rank % c.ssm_group_count != 0) {
    return GgufKeyError(gguf_keys::kQwen35SsmTimeStepRank,
                        absl::StrCat("is ", c.ssm_time_step_rank,
                                     ", not a multiple of ssm.group_count ", c.ssm_group_count));
  }
  if (c.ssm_inner_size != c.ssm_time_step_rank * c.ssm_state_size) {
    return GgufKeyError(
        gguf_keys::kQwen35SsmInnerSize,
        absl::StrCat("is ", c.ssm_inner_size, ", expected time_step_rank x state_size = ",
                     c.ssm_time_step_rank * c.ssm_state_size));
  }

  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) {
    return absl::InvalidArgumentError("missing tensor 'token_embd.weight'");
  }
  if (embd->ne.size() != 2 || embd->ne[1] == 0 || embd->ne[1] > (uint64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor 'token_embd.weight' has shape ",
                                                   embd->ShapeString(),
                                                   ", expected [embedding_length, vocab]"));
  }
  c.vocab_size = static_cast<int64_t>(embd->ne[1]);
  return c;
}

std::vector<ExpectedTensor> Qwen35Inventory(const Qwen35Config& c, bool with_output) {
  using U = uint64_t;
  const U h = c.embedding_length, f = c.feed_forward_length, v = c.vocab_size;
  const U q_rows = 2 * c.head_count * c.key_length;  // query and output gate, per head
  const U kv_rows = c.head_count_kv * c.key_length;
  const U attn_out = c.head_count * c.value_length;
  const U conv = c.gdn_conv_dim(), inner = c.ssm_inner_size, nv = c.ssm_time_step_rank;
  std::vector<ExpectedTensor> out;
  auto add = [&out](std::string name, std::vector<U> ne, TensorClass cls) {
    out.push_back({std::move(name), std::move(ne), cls});
  };
  add("token_embd.weight", {h, v}, TensorClass::kProjection);
  if (with_output) add("output.weight", {h, v}, TensorClass::kProjection);
  add("output_norm.weight", {h}, TensorClass::kF32);
  for (int64_t i = 0; i < c.block_count; ++i) {
    const std::string p = absl::StrCat("blk.", i, ".");
    add(p + "attn_norm.weight", {h}, TensorClass::kF32);
    if (c.IsFullAttention(i)) {
      add(p + "attn_q.weight", {h, q_rows}, TensorClass::kProjection);
      add(p + "attn_k.weight", {h, kv_rows}, TensorClass::kProjection);
      add(p + "attn_v.weight", {h, kv_rows}, TensorClass::kProjection);
      add(p + "attn_output.weight", {attn_out, h}, TensorClass::kProjection);
      add(p + "attn_q_norm.weight", {U(c.key_length)}, TensorClass::kF32);
      add(p + "attn_k_norm.weight", {U(c.key_length)}, TensorClass::kF32);
    } else {
      add(p + "attn_qkv.weight", {h, conv}, TensorClass::kProjection);
      add(p + "attn_gate.weight", {h, inner}, TensorClass::kProjection);
      add(p + "ssm_alpha.weight", {h, nv}, TensorClass::kDenseProjection);
      add(p + "ssm_beta.weight", {h, nv}, TensorClass::kDenseProjection);
      add(p + "ssm_conv1d.weight", {U(c.ssm_conv_kernel), conv}, TensorClass::kF32);
      add(p + "ssm_a", {nv}, TensorClass::kF32);
      add(p + "ssm_dt.bias", {nv}, TensorClass::kF32);
      add(p + "ssm_norm.weight", {U(c.ssm_state_size)}, TensorClass::kF32);
      add(p + "ssm_out.weight", {inner, h}, TensorClass::kProjection);
    }
    add(p + "post_attention_norm.weight", {h}, TensorClass::kF32);
    add(p + "ffn_gate.weight", {h, f}, TensorClass::kProjection);
    add(p + "ffn_up.weight", {h, f}, TensorClass::kProjection);
    add(p + "ffn_down.weight", {f, h}, TensorClass::kProjection);
  }
  return out;
}

namespace {

bool TypeAllowed(TensorClass cls, uint32_t type) {
  switch (cls) {
    case TensorClass::kProjection:
      return FindTernaryFormat(type) != nullptr || type == kGgmlF32 || type == kGgmlF16 ||
             type == kGgmlBf16;
    case TensorClass::kDenseProjection:
      return type == kGgmlF32 || type == kGgmlF16 || type == kGgmlBf16;
    case TensorClass::kF32:
      return type == kGgmlF32;
  }
  return false;
}

const char* AllowedTypes(TensorClass cls) {
  switch (cls) {
    case TensorClass::kProjection:
      return "PQ2_0, PTQ1_0, F32, F16 or BF16";
    case TensorClass::kDenseProjection:
      return "F32, F16 or BF16";
    case TensorClass::kF32:
      return "F32";
  }
  return "";
}

}  // namespace

absl::Status CheckQwen35Inventory(const GgufFile& file, const Qwen35Config& config,
                                  bool with_output) {
  return CheckTensorTable(
      file, Qwen35Inventory(config, with_output),
      [](const ExpectedTensor& e, uint32_t type) { return TypeAllowed(e.cls, type); },
      [](const ExpectedTensor& e) { return AllowedTypes(e.cls); },
      "not part of a qwen35 model with these parameters");
}

void WriteQwen35Config(const Qwen35Config& c, GgufWriter& w) {
  w.SetKv(gguf_keys::kGeneralArchitecture, GgufValue::String("qwen35"));
  w.SetKv(gguf_keys::kQwen35BlockCount, GgufValue::U32(c.block_count));
  w.SetKv(gguf_keys::kQwen35ContextLength, GgufValue::U32(c.context_length));
  w.SetKv(gguf_keys::kQwen35EmbeddingLength, GgufValue::U32(c.embedding_length));
  w.SetKv(gguf_keys::kQwen35FeedForwardLength, GgufValue::U32(c.feed_forward_length));
  w.SetKv(gguf_keys::kQwen35AttentionHeadCount, GgufValue::U32(c.head_count));
  w.SetKv(gguf_keys::kQwen35AttentionHeadCountKv, GgufValue::U32(c.head_count_kv));
  w.SetKv(gguf_keys::kQwen35AttentionKeyLength, GgufValue::U32(c.key_length));
  w.SetKv(gguf_keys::kQwen35AttentionValueLength, GgufValue::U32(c.value_length));
  w.SetKv(gguf_keys::kQwen35AttentionLayerNormRmsEpsilon, GgufValue::F32(c.rms_epsilon));
  w.SetKv(gguf_keys::kQwen35RopeDimensionCount, GgufValue::U32(c.rope_dimension_count));
  std::vector<int32_t> sections(c.rope_sections.begin(), c.rope_sections.end());
  w.SetKv(gguf_keys::kQwen35RopeDimensionSections, GgufValue::I32Array(sections));
  w.SetKv(gguf_keys::kQwen35RopeFreqBase, GgufValue::F32(c.rope_freq_base));
  w.SetKv(gguf_keys::kQwen35FullAttentionInterval, GgufValue::U32(c.full_attention_interval));
  w.SetKv(gguf_keys::kQwen35SsmConvKernel, GgufValue::U32(c.ssm_conv_kernel));
  w.SetKv(gguf_keys::kQwen35SsmStateSize, GgufValue::U32(c.ssm_state_size));
  w.SetKv(gguf_keys::kQwen35SsmGroupCount, GgufValue::U32(c.ssm_group_count));
  w.SetKv(gguf_keys::kQwen35SsmTimeStepRank, GgufValue::U32(c.ssm_time_step_rank));
  w.SetKv(gguf_keys::kQwen35SsmInnerSize, GgufValue::U32(c.ssm_inner_size));
}

}  // namespace walsh
