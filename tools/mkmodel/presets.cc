#include "tools/mkmodel/presets.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace walsh {
namespace {

// The vocabulary ends with 34 special tokens after the regular ones, padded to a multiple of
// 256: for the 27B shape that is exactly 248,044 + 276 = 248,320 (docs/format.md §9).
int64_t VocabFor(int64_t regular) { return (regular + 34 + 255) / 256 * 256; }

ModelPreset Tiny() {
  ModelPreset p;
  p.name = "tiny";
  p.block_size = 128;
  p.regular_tokens = 640;
  Qwen35Config& c = p.config;
  c.block_count = 4;
  c.context_length = 4096;
  c.embedding_length = 256;
  c.feed_forward_length = 384;  // 3 rotation blocks: an odd count, like the 27B's 17
  c.head_count = 4;
  c.head_count_kv = 2;
  c.key_length = c.value_length = 64;
  c.rms_epsilon = 1e-6f;
  c.rope_dimension_count = 32;
  c.rope_sections = {6, 5, 5, 0};
  c.rope_freq_base = 1e7f;
  c.full_attention_interval = 4;
  c.ssm_conv_kernel = 4;
  c.ssm_state_size = 64;
  c.ssm_group_count = 2;
  c.ssm_time_step_rank = 4;
  c.ssm_inner_size = 256;
  c.vocab_size = VocabFor(p.regular_tokens);
  return p;
}

ModelPreset Small() {
  ModelPreset p;
  p.name = "small";
  p.block_size = 256;
  p.regular_tokens = 8000;
  Qwen35Config& c = p.config;
  c.block_count = 8;
  c.context_length = 8192;
  c.embedding_length = 1024;
  c.feed_forward_length = 2816;  // 11 rotation blocks
  c.head_count = 8;
  c.head_count_kv = 2;
  c.key_length = c.value_length = 128;
  c.rms_epsilon = 1e-6f;
  c.rope_dimension_count = 64;
  c.rope_sections = {11, 11, 10, 0};
  c.rope_freq_base = 1e7f;
  c.full_attention_interval = 4;
  c.ssm_conv_kernel = 4;
  c.ssm_state_size = 128;
  c.ssm_group_count = 4;
  c.ssm_time_step_rank = 12;  // 3 value heads per key head, as in the 27B model
  c.ssm_inner_size = 1536;
  c.vocab_size = VocabFor(p.regular_tokens);
  return p;
}

// docs/format.md §4-§5: the released Ternary Bonsai 2 27B shapes.
ModelPreset Bonsai27b() {
  ModelPreset p;
  p.name = "27b";
  p.block_size = 1024;
  p.regular_tokens = 248044;
  Qwen35Config& c = p.config;
  c.block_count = 64;
  c.context_length = 262144;
  c.embedding_length = 5120;
  c.feed_forward_length = 17408;
  c.head_count = 24;
  c.head_count_kv = 4;
  c.key_length = c.value_length = 256;
  c.rms_epsilon = 1e-6f;
  c.rope_dimension_count = 64;
  c.rope_sections = {11, 11, 10, 0};
  c.rope_freq_base = 1e7f;
  c.full_attention_interval = 4;
  c.ssm_conv_kernel = 4;
  c.ssm_state_size = 128;
  c.ssm_group_count = 16;
  c.ssm_time_step_rank = 48;
  c.ssm_inner_size = 6144;
  c.vocab_size = VocabFor(p.regular_tokens);
  return p;
}

}  // namespace

std::vector<std::string> PresetNames() { return {"tiny", "small", "27b"}; }

absl::StatusOr<ModelPreset> FindPreset(const std::string& name) {
  if (name == "tiny") return Tiny();
  if (name == "small") return Small();
  if (name == "27b") return Bonsai27b();
  return absl::InvalidArgumentError(absl::StrCat("unknown preset \"", name, "\"; expected one of ",
                                                 absl::StrJoin(PresetNames(), ", ")));
}

}  // namespace walsh
