// Writes small valid GGUF files as the fuzzer's seed corpus: a micro qwen35 model that passes
// every check (so mutations reach the contract and inventory code), a micro vision projector
// likewise, and a metadata-only file with every value type.
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_writer.h"
#include "worker/model/mmproj_config.h"
#include "worker/model/prism_contract.h"
#include "worker/model/qwen35_config.h"

namespace walsh {
namespace {

absl::Status Zeros(size_t, const GgufTensorSpec& spec, GgufByteSink& sink) {
  return sink.Write(std::string(spec.n_bytes, '\1').data(), spec.n_bytes);
}

absl::Status WriteMicroModel(const std::string& path) {
  Qwen35Config c;
  c.block_count = 2;
  c.context_length = 64;
  c.embedding_length = 128;
  c.feed_forward_length = 128;
  c.head_count = 1;
  c.head_count_kv = 1;
  c.key_length = c.value_length = 128;
  c.rms_epsilon = 1e-6f;
  c.rope_dimension_count = 64;
  c.rope_sections = {11, 11, 10, 0};
  c.rope_freq_base = 1e7f;
  c.full_attention_interval = 2;
  c.ssm_conv_kernel = 4;
  c.ssm_state_size = 128;
  c.ssm_group_count = 1;
  c.ssm_time_step_rank = 1;
  c.ssm_inner_size = 128;
  c.vocab_size = 128;
  GgufWriter w;
  WriteQwen35Config(c, w);
  std::vector<std::string> folded;
  for (const ExpectedTensor& e : Qwen35Inventory(c, true)) {
    const bool ternary = e.cls == TensorClass::kProjection;
    auto s = w.AddTensor(e.name, e.ne, ternary ? kGgmlPq2_0 : kGgmlF32);
    if (!s.ok()) return s;
    if (ternary && e.name != "token_embd.weight") folded.push_back(e.name);
  }
  w.SetKv("prism.hadamard.version", GgufValue::U32(1));
  w.SetKv("prism.hadamard.block_size", GgufValue::U32(128));
  w.SetKv("prism.hadamard.transform", GgufValue::String(kPrismTransform));
  w.SetKv("prism.hadamard.axis", GgufValue::String(kPrismAxis));
  w.SetKv("prism.hadamard.sign_mode", GgufValue::String("explicit"));
  w.SetKv("prism.hadamard.sign_widths", GgufValue::I32Array({128}));
  std::vector<int32_t> signs(128);
  for (int i = 0; i < 128; ++i) signs[i] = i % 3 ? 1 : -1;
  w.SetKv("prism.hadamard.sign_values", GgufValue::I32Array(signs));
  w.SetKv("prism.hadamard.weight_names", GgufValue::StringArray(folded));
  w.SetKv("prism.hadamard.inverse_weight_names", GgufValue::StringArray({"token_embd.weight"}));
  w.SetKv("prism.hadamard.gdn_v_grouped", GgufValue::Bool(true));
  return w.WriteFile(path, Zeros);
}

absl::Status WriteMicroProjector(const std::string& path) {
  MmprojConfig c;
  c.image_size = 8;
  c.patch_size = 4;
  c.embedding_length = 16;
  c.feed_forward_length = 24;
  c.block_count = 1;
  c.head_count = 4;
  c.layer_norm_epsilon = 1e-6f;
  c.projection_dim = 32;
  c.image_mean = {0.5f, 0.5f, 0.5f};
  c.image_std = {0.5f, 0.5f, 0.5f};
  GgufWriter w;
  WriteMmprojConfig(c, w);
  for (const ExpectedVisionTensor& e : MmprojInventory(c)) {
    auto s = w.AddTensor(e.name, e.ne, e.cls == VisionTensorClass::kF32 ? kGgmlF32 : kGgmlF16);
    if (!s.ok()) return s;
  }
  return w.WriteFile(path, Zeros);
}

absl::Status WriteMetadataFile(const std::string& path) {
  GgufWriter w;
  w.SetKv("u8", GgufValue::Uint(GgufType::kUint8, 1));
  w.SetKv("i16", GgufValue::Int(GgufType::kInt16, -2));
  w.SetKv("u64", GgufValue::Uint(GgufType::kUint64, 3));
  w.SetKv("f64", GgufValue::Float(GgufType::kFloat64, 0.5));
  w.SetKv("b", GgufValue::Bool(true));
  w.SetKv("s", GgufValue::String("x"));
  w.SetKv("nested", GgufValue::Array(GgufType::kArray, {GgufValue::StringArray({"a"})}));
  w.SetKv("general.alignment", GgufValue::U32(16));
  auto s = w.AddTensor("t", {128, 2}, kGgmlPtq1_0);
  if (!s.ok()) return s;
  return w.WriteFile(path, Zeros);
}

}  // namespace
}  // namespace walsh

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  for (auto s : {walsh::WriteMicroModel(dir + "/micro_model.gguf"),
                 walsh::WriteMicroProjector(dir + "/micro_projector.gguf"),
                 walsh::WriteMetadataFile(dir + "/metadata.gguf")}) {
    if (!s.ok()) {
      std::fprintf(stderr, "gguf_fuzz_seeds: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  return 0;
}
