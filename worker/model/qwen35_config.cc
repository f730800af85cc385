#include "worker/model/qwen35_config.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/weight_format.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_writer.h"

namespace walsh {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;

absl::Status Invalid(absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("key '", key, "' ", why));
}

// The qwen35.* keys walsh understands; any other is refused so nothing changes the math unseen.
constexpr const char* kKnownKeys[] = {
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "rope.dimension_count",
    "rope.dimension_sections",
    "rope.freq_base",
    "full_attention_interval",
    "ssm.conv_kernel",
    "ssm.state_size",
    "ssm.group_count",
    "ssm.time_step_rank",
    "ssm.inner_size",
};

}  // namespace

absl::StatusOr<Qwen35Config> ParseQwen35Config(const GgufFile& file) {
  ASSIGN_OR_RETURN(std::string arch, file.GetString("general.architecture"));
  if (arch != "qwen35") {
    return Invalid("general.architecture",
                   absl::StrCat("is \"", arch, "\"; walsh serves only \"qwen35\""));
  }
  absl::flat_hash_set<std::string> known;
  for (const char* k : kKnownKeys) known.insert(absl::StrCat("qwen35.", k));
  for (const auto& [key, value] : file.kvs()) {
    if (absl::StartsWith(key, "qwen35.") && !known.contains(key)) {
      return Invalid(key,
                     absl::StrCat("(value ", value.DebugString(),
                                  ") is not part of the qwen35 architecture walsh implements"));
    }
  }

  Qwen35Config c;
  ASSIGN_OR_RETURN(c.block_count, file.GetInt("qwen35.block_count", 1, 4096));
  ASSIGN_OR_RETURN(c.context_length, file.GetInt("qwen35.context_length", 1, int64_t{1} << 30));
  ASSIGN_OR_RETURN(c.embedding_length, file.GetInt("qwen35.embedding_length", 1, kMaxDim));
  ASSIGN_OR_RETURN(c.feed_forward_length, file.GetInt("qwen35.feed_forward_length", 1, kMaxDim));
  ASSIGN_OR_RETURN(c.head_count, file.GetInt("qwen35.attention.head_count", 1, 4096));
  ASSIGN_OR_RETURN(c.head_count_kv, file.GetInt("qwen35.attention.head_count_kv", 1, 4096));
  ASSIGN_OR_RETURN(c.key_length, file.GetInt("qwen35.attention.key_length", 1, 65536));
  ASSIGN_OR_RETURN(c.value_length, file.GetInt("qwen35.attention.value_length", 1, 65536));
  ASSIGN_OR_RETURN(double eps, file.GetFloat("qwen35.attention.layer_norm_rms_epsilon"));
  c.rms_epsilon = static_cast<float>(eps);
  ASSIGN_OR_RETURN(c.rope_dimension_count, file.GetInt("qwen35.rope.dimension_count", 2, 65536));
  ASSIGN_OR_RETURN(std::vector<int64_t> sections,
                   file.GetIntArray("qwen35.rope.dimension_sections"));
  ASSIGN_OR_RETURN(double freq_base, file.GetFloat("qwen35.rope.freq_base"));
  c.rope_freq_base = static_cast<float>(freq_base);
  ASSIGN_OR_RETURN(c.full_attention_interval,
                   file.GetInt("qwen35.full_attention_interval", 1, 4096));
  ASSIGN_OR_RETURN(c.ssm_conv_kernel, file.GetInt("qwen35.ssm.conv_kernel", 1, 64));
  ASSIGN_OR_RETURN(c.ssm_state_size, file.GetInt("qwen35.ssm.state_size", 1, 65536));
  ASSIGN_OR_RETURN(c.ssm_group_count, file.GetInt("qwen35.ssm.group_count", 1, 4096));
  ASSIGN_OR_RETURN(c.ssm_time_step_rank, file.GetInt("qwen35.ssm.time_step_rank", 1, 4096));
  ASSIGN_OR_RETURN(c.ssm_inner_size, file.GetInt("qwen35.ssm.inner_size", 1, kMaxDim));

  if (!(eps > 0 && eps < 1)) {
    return Invalid("qwen35.attention.layer_norm_rms_epsilon",
                   absl::StrCat("is ", eps, ", not in (0, 1)"));
  }
  if (!(freq_base > 1)) {
    return Invalid("qwen35.rope.freq_base", absl::StrCat("is ", freq_base, ", not > 1"));
  }
  if (c.head_count % c.head_count_kv != 0) {
    return Invalid(
        "qwen35.attention.head_count_kv",
        absl::StrCat("is ", c.head_count_kv, ", which does not divide head_count ", c.head_count));
  }
  if (c.key_length != c.value_length) {
    return Invalid("qwen35.attention.value_length",
                   absl::StrCat("is ", c.value_length, ", but walsh needs it equal to key_length ",
                                c.key_length));
  }
  if (c.rope_dimension_count % 2 != 0 || c.rope_dimension_count > c.key_length) {
    return Invalid("qwen35.rope.dimension_count",
                   absl::StrCat("is ", c.rope_dimension_count,
                                ", not an even number <= key_length ", c.key_length));
  }
  if (sections.size() != 4) {
    return Invalid("qwen35.rope.dimension_sections",
                   absl::StrCat("has ", sections.size(), " entries, expected 4"));
  }
  int64_t section_sum = 0;
  for (size_t i = 0; i < 4; ++i) {
    if (sections[i] < 0) return Invalid("qwen35.rope.dimension_sections", "has a negative entry");
    c.rope_sections[i] = sections[i];
    section_sum += sections[i];
  }
  if (section_sum != c.rope_dimension_count / 2) {
    return Invalid(
        "qwen35.rope.dimension_sections",
        absl::StrCat("[", absl::StrJoin(sections, ", "), "] sum to ", section_sum,
                     ", expected rope.dimension_count / 2 = ", c.rope_dimension_count / 2));
  }
  if (c.ssm_time_step_rank % c.ssm_group_count != 0) {
    return Invalid("qwen35.ssm.time_step_rank",
                   absl::StrCat("is ", c.ssm_time_step_rank, ", not a multiple of ssm.group_count ",
                                c.ssm_group_count));
  }
  if (c.ssm_inner_size != c.ssm_time_step_rank * c.ssm_state_size) {
    return Invalid(
        "qwen35.ssm.inner_size",
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

std::string Shape(const std::vector<uint64_t>& ne) {
  return absl::StrCat("[", absl::StrJoin(ne, ", "), "]");
}

}  // namespace

absl::Status CheckQwen35Inventory(const GgufFile& file, const Qwen35Config& config,
                                  bool with_output) {
  absl::flat_hash_set<std::string> expected_names;
  for (const ExpectedTensor& e : Qwen35Inventory(config, with_output)) {
    expected_names.insert(e.name);
    const GgufTensorInfo* t = file.FindTensor(e.name);
    if (t == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("missing tensor '", e.name, "'"));
    if (t->ne != e.ne) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "' has shape ",
                                                     t->ShapeString(), ", expected ", Shape(e.ne)));
    }
    if (!TypeAllowed(e.cls, t->type)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "' has type ",
                                                     GgmlTypeName(t->type), ", expected ",
                                                     AllowedTypes(e.cls)));
    }
  }
  for (const GgufTensorInfo& t : file.tensors()) {
    if (!expected_names.contains(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected tensor '", t.name, "': not part of a qwen35 model with these parameters"));
    }
  }
  return absl::OkStatus();
}

void WriteQwen35Config(const Qwen35Config& c, GgufWriter& w) {
  w.SetKv("general.architecture", GgufValue::String("qwen35"));
  w.SetKv("qwen35.block_count", GgufValue::U32(c.block_count));
  w.SetKv("qwen35.context_length", GgufValue::U32(c.context_length));
  w.SetKv("qwen35.embedding_length", GgufValue::U32(c.embedding_length));
  w.SetKv("qwen35.feed_forward_length", GgufValue::U32(c.feed_forward_length));
  w.SetKv("qwen35.attention.head_count", GgufValue::U32(c.head_count));
  w.SetKv("qwen35.attention.head_count_kv", GgufValue::U32(c.head_count_kv));
  w.SetKv("qwen35.attention.key_length", GgufValue::U32(c.key_length));
  w.SetKv("qwen35.attention.value_length", GgufValue::U32(c.value_length));
  w.SetKv("qwen35.attention.layer_norm_rms_epsilon", GgufValue::F32(c.rms_epsilon));
  w.SetKv("qwen35.rope.dimension_count", GgufValue::U32(c.rope_dimension_count));
  std::vector<int32_t> sections(c.rope_sections.begin(), c.rope_sections.end());
  w.SetKv("qwen35.rope.dimension_sections", GgufValue::I32Array(sections));
  w.SetKv("qwen35.rope.freq_base", GgufValue::F32(c.rope_freq_base));
  w.SetKv("qwen35.full_attention_interval", GgufValue::U32(c.full_attention_interval));
  w.SetKv("qwen35.ssm.conv_kernel", GgufValue::U32(c.ssm_conv_kernel));
  w.SetKv("qwen35.ssm.state_size", GgufValue::U32(c.ssm_state_size));
  w.SetKv("qwen35.ssm.group_count", GgufValue::U32(c.ssm_group_count));
  w.SetKv("qwen35.ssm.time_step_rank", GgufValue::U32(c.ssm_time_step_rank));
  w.SetKv("qwen35.ssm.inner_size", GgufValue::U32(c.ssm_inner_size));
}

}  // namespace walsh
