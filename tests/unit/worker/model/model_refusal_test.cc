// One test per contract rule and per inventory rule: a mutated tiny model is refused and the
// message names the key or tensor (docs/format.md §5, §6, §12).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/mkmodel/synthetic_model.h"
#include "worker/model/ggml_types.h"
#include "worker/model/model_file.h"

namespace walsh {
namespace {

class ModelRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = SyntheticModel::Create(SyntheticModelOptions{});
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }

  GgufWriter& w() { return model_->mutable_writer(); }

  // Validation only reads metadata and the tensor table, so zeros stand in for the data.
  absl::Status Load() {
    auto bytes = w().WriteString([](size_t, const GgufTensorSpec& spec, GgufByteSink& sink) {
      return sink.Write(std::string(spec.n_bytes, '\0').data(), spec.n_bytes);
    });
    if (!bytes.ok()) return bytes.status();
    bytes_ = std::move(*bytes);
    auto gguf = GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size());
    if (!gguf.ok()) return gguf.status();
    return ValidateModelFile(std::move(*gguf)).status();
  }

  void ExpectRefused(const std::vector<std::string>& needles) {
    const absl::Status s = Load();
    ASSERT_FALSE(s.ok()) << "accepted, expected a refusal naming " << needles[0];
    for (const std::string& n : needles) {
      EXPECT_NE(s.message().find(n), std::string::npos) << "message: " << s.message();
    }
  }

  const GgufValue& Kv(const std::string& key) {
    for (const auto& kv : w().kvs()) {
      if (kv.first == key) return kv.second;
    }
    ADD_FAILURE() << "no key " << key;
    static GgufValue none;
    return none;
  }

  std::vector<std::string> Strings(const std::string& key) {
    std::vector<std::string> out;
    for (const GgufValue& v : Kv(key).elems()) out.push_back(v.str());
    return out;
  }

  std::vector<int32_t> Ints(const std::string& key) {
    std::vector<int32_t> out;
    for (const GgufValue& v : Kv(key).elems()) out.push_back(static_cast<int32_t>(v.raw_int()));
    return out;
  }

  // Rebuilds the tensor table with `name` changed (or removed when `remove`).
  void EditTensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                  bool remove = false) {
    std::vector<GgufTensorSpec> old = w().tensors();
    w().mutable_tensors().clear();
    bool found = false;
    for (const GgufTensorSpec& t : old) {
      if (t.name == name) {
        found = true;
        if (!remove) {
          ASSERT_TRUE(w().AddTensor(t.name, ne, type).ok());
        }
      } else {
        ASSERT_TRUE(w().AddTensor(t.name, t.ne, t.type).ok());
      }
    }
    ASSERT_TRUE(found) << name;
  }

  std::unique_ptr<SyntheticModel> model_;
  std::string bytes_;
};

TEST_F(ModelRefusalTest, AcceptsTheUnmodifiedModel) { EXPECT_TRUE(Load().ok()) << Load(); }

TEST_F(ModelRefusalTest, AcceptsAnyIntegerTypeForIntegerKeys) {
  w().SetKv("prism.hadamard.version", GgufValue::Uint(GgufType::kUint8, 1));
  w().SetKv("prism.hadamard.block_size", GgufValue::Int(GgufType::kInt32, 128));
  w().SetKv("qwen35.block_count", GgufValue::Uint(GgufType::kUint64, 4));
  EXPECT_TRUE(Load().ok()) << Load();
}

TEST_F(ModelRefusalTest, WrongTransform) {
  w().SetKv("prism.hadamard.transform", GgufValue::String("sequency-walsh-hadamard"));
  ExpectRefused({"prism.hadamard.transform", "sequency-walsh-hadamard"});
}

TEST_F(ModelRefusalTest, WrongAxis) {
  w().SetKv("prism.hadamard.axis", GgufValue::String("output-first-dimension"));
  ExpectRefused({"prism.hadamard.axis", "output-first-dimension"});
}

TEST_F(ModelRefusalTest, NonPowerOfTwoBlock) {
  w().SetKv("prism.hadamard.block_size", GgufValue::U32(96));
  ExpectRefused({"prism.hadamard.block_size", "96"});
}

TEST_F(ModelRefusalTest, UnknownVersion) {
  w().SetKv("prism.hadamard.version", GgufValue::U32(3));
  ExpectRefused({"prism.hadamard.version", "3"});
}

TEST_F(ModelRefusalTest, VersionTypeMustBeInteger) {
  w().SetKv("prism.hadamard.version", GgufValue::String("1"));
  ExpectRefused({"prism.hadamard.version", "STRING"});
}

TEST_F(ModelRefusalTest, VersionTwoWithoutTiedOutput) {
  w().SetKv("prism.hadamard.version", GgufValue::U32(2));
  ExpectRefused({"prism.hadamard.tied_output"});
}

TEST_F(ModelRefusalTest, TiedOutputWithSeparateHead) {
  w().SetKv("prism.hadamard.version", GgufValue::U32(2));
  w().SetKv("prism.hadamard.tied_output", GgufValue::Bool(true));
  ExpectRefused({"prism.hadamard.tied_output", "output.weight"});
}

TEST_F(ModelRefusalTest, UnknownSignMode) {
  w().SetKv("prism.hadamard.sign_mode", GgufValue::String("random"));
  ExpectRefused({"prism.hadamard.sign_mode", "random"});
}

TEST_F(ModelRefusalTest, IdentityModeWithSignVectors) {
  w().SetKv("prism.hadamard.sign_mode", GgufValue::String("identity"));
  ExpectRefused({"prism.hadamard.sign_widths", "identity"});
}

TEST_F(ModelRefusalTest, IdentityModeWithoutSignsIsAccepted) {
  w().SetKv("prism.hadamard.sign_mode", GgufValue::String("identity"));
  w().RemoveKv("prism.hadamard.sign_widths");
  w().RemoveKv("prism.hadamard.sign_values");
  EXPECT_TRUE(Load().ok()) << Load();
}

TEST_F(ModelRefusalTest, MissingSignWidth) {
  // Drop the FFN width (384): ffn_down's input width then has no sign vector.
  std::vector<int32_t> values = Ints("prism.hadamard.sign_values");
  values.resize(256);
  w().SetKv("prism.hadamard.sign_widths", GgufValue::I32Array({256}));
  w().SetKv("prism.hadamard.sign_values", GgufValue::I32Array(values));
  ExpectRefused({"blk.0.ffn_down.weight", "384", "sign"});
}

TEST_F(ModelRefusalTest, SignValueThree) {
  std::vector<int32_t> values = Ints("prism.hadamard.sign_values");
  values[300] = 3;
  w().SetKv("prism.hadamard.sign_values", GgufValue::I32Array(values));
  ExpectRefused({"prism.hadamard.sign_values", "element 300 is 3"});
}

TEST_F(ModelRefusalTest, SignValueCountMismatch) {
  std::vector<int32_t> values = Ints("prism.hadamard.sign_values");
  values.pop_back();
  w().SetKv("prism.hadamard.sign_values", GgufValue::I32Array(values));
  ExpectRefused({"prism.hadamard.sign_values", "639"});
}

TEST_F(ModelRefusalTest, SignWidthNotMultipleOfBlock) {
  w().SetKv("prism.hadamard.sign_widths", GgufValue::I32Array({256, 300}));
  ExpectRefused({"prism.hadamard.sign_widths", "300"});
}

TEST_F(ModelRefusalTest, DuplicateSignWidth) {
  w().SetKv("prism.hadamard.sign_widths", GgufValue::I32Array({256, 256}));
  ExpectRefused({"prism.hadamard.sign_widths", "twice"});
}

TEST_F(ModelRefusalTest, EmptyWeightNames) {
  w().SetKv("prism.hadamard.weight_names", GgufValue::StringArray({}));
  ExpectRefused({"prism.hadamard.weight_names", "empty"});
}

TEST_F(ModelRefusalTest, DuplicateWeightName) {
  std::vector<std::string> names = Strings("prism.hadamard.weight_names");
  names.push_back("blk.2.ffn_up.weight");
  w().SetKv("prism.hadamard.weight_names", GgufValue::StringArray(names));
  ExpectRefused({"prism.hadamard.weight_names", "'blk.2.ffn_up.weight' twice"});
}

TEST_F(ModelRefusalTest, UnfoldableWeightName) {
  std::vector<std::string> names = Strings("prism.hadamard.weight_names");
  names.push_back("blk.0.attn_norm.weight");
  w().SetKv("prism.hadamard.weight_names", GgufValue::StringArray(names));
  ExpectRefused({"prism.hadamard.weight_names", "blk.0.attn_norm.weight", "foldable"});
}

TEST_F(ModelRefusalTest, WeightNameWithoutTensor) {
  std::vector<std::string> names = Strings("prism.hadamard.weight_names");
  names.push_back("blk.9.ffn_up.weight");
  w().SetKv("prism.hadamard.weight_names", GgufValue::StringArray(names));
  ExpectRefused({"prism.hadamard.weight_names", "blk.9.ffn_up.weight", "no such tensor"});
}

TEST_F(ModelRefusalTest, InverseNameOtherThanTokenEmbd) {
  w().SetKv("prism.hadamard.inverse_weight_names", GgufValue::StringArray({"output.weight"}));
  ExpectRefused({"prism.hadamard.inverse_weight_names", "output.weight"});
}

TEST_F(ModelRefusalTest, InverseNameAlsoFolded) {
  std::vector<std::string> names = Strings("prism.hadamard.weight_names");
  names.push_back("token_embd.weight");
  w().SetKv("prism.hadamard.weight_names", GgufValue::StringArray(names));
  // token_embd is not a foldable name, so it is refused already as a weight name.
  ExpectRefused({"prism.hadamard.weight_names", "token_embd.weight"});
}

TEST_F(ModelRefusalTest, FoldedWidthNotMultipleOfBlock) {
  // Block 256 leaves ffn_down (input width 384) straddling a block.
  w().SetKv("prism.hadamard.block_size", GgufValue::U32(256));
  std::vector<int32_t> values = Ints("prism.hadamard.sign_values");
  values.resize(256);
  w().SetKv("prism.hadamard.sign_widths", GgufValue::I32Array({256}));
  w().SetKv("prism.hadamard.sign_values", GgufValue::I32Array(values));
  ExpectRefused({"blk.0.ffn_down.weight", "384", "prism.hadamard.block_size"});
}

TEST_F(ModelRefusalTest, UnknownPrismKey) {
  w().SetKv("prism.hadamard.rotation_seed", GgufValue::U32(5));
  ExpectRefused({"prism.hadamard.rotation_seed"});
}

TEST_F(ModelRefusalTest, NoContractAtAll) {
  std::vector<std::string> prism;
  for (const auto& kv : w().kvs()) {
    if (kv.first.rfind("prism.hadamard.", 0) == 0) prism.push_back(kv.first);
  }
  for (const std::string& k : prism) w().RemoveKv(k);
  ExpectRefused({"prism.hadamard.version", "Prism-folded"});
}

TEST_F(ModelRefusalTest, WrongArchitecture) {
  w().SetKv("general.architecture", GgufValue::String("llama"));
  ExpectRefused({"general.architecture", "llama"});
}

TEST_F(ModelRefusalTest, UnknownArchitectureKey) {
  w().SetKv("qwen35.nextn_predict_layers", GgufValue::U32(1));
  ExpectRefused({"qwen35.nextn_predict_layers"});
}

TEST_F(ModelRefusalTest, MissingHyperParameter) {
  w().RemoveKv("qwen35.ssm.state_size");
  ExpectRefused({"missing key 'qwen35.ssm.state_size'"});
}

TEST_F(ModelRefusalTest, KvHeadsMustDivideHeads) {
  w().SetKv("qwen35.attention.head_count_kv", GgufValue::U32(3));
  ExpectRefused({"qwen35.attention.head_count_kv", "3"});
}

TEST_F(ModelRefusalTest, RopeSectionsMustCoverRotaryPairs) {
  w().SetKv("qwen35.rope.dimension_sections", GgufValue::I32Array({6, 6, 6, 0}));
  ExpectRefused({"qwen35.rope.dimension_sections", "18"});
}

TEST_F(ModelRefusalTest, InnerSizeMustMatchHeads) {
  w().SetKv("qwen35.ssm.inner_size", GgufValue::U32(512));
  ExpectRefused({"qwen35.ssm.inner_size", "512"});
}

TEST_F(ModelRefusalTest, MissingTensor) {
  std::vector<std::string> names = Strings("prism.hadamard.weight_names");
  std::erase(names, "blk.1.ffn_up.weight");
  w().SetKv("prism.hadamard.weight_names", GgufValue::StringArray(names));
  EditTensor("blk.1.ffn_up.weight", {}, 0, /*remove=*/true);
  ExpectRefused({"missing tensor 'blk.1.ffn_up.weight'"});
}

TEST_F(ModelRefusalTest, MisShapedTensor) {
  EditTensor("blk.0.attn_gate.weight", {256, 128}, kGgmlPq2_0);
  ExpectRefused({"blk.0.attn_gate.weight", "[256, 128]", "[256, 256]"});
}

TEST_F(ModelRefusalTest, WrongTensorType) {
  EditTensor("blk.0.ssm_a", {4}, kGgmlF16);
  ExpectRefused({"blk.0.ssm_a", "F16", "expected F32"});
}

TEST_F(ModelRefusalTest, UnexpectedTensor) {
  ASSERT_TRUE(w().AddTensor("blk.0.ffn_extra.weight", {256}, kGgmlF32).ok());
  ExpectRefused({"unexpected tensor 'blk.0.ffn_extra.weight'"});
}

TEST_F(ModelRefusalTest, DuplicateTensorName) {
  ASSERT_TRUE(w().AddTensor("blk.0.ffn_up.weight", {256, 384}, kGgmlPq2_0).ok());
  ExpectRefused({"duplicate tensor name 'blk.0.ffn_up.weight'"});
}

TEST_F(ModelRefusalTest, TokenizerSizeMustMatchEmbedding) {
  std::vector<std::string> tokens = Strings("tokenizer.ggml.tokens");
  tokens.pop_back();
  w().SetKv("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  ExpectRefused({"tokenizer.ggml.tokens", "767"});
}

TEST_F(ModelRefusalTest, TruncatedTensorData) {
  ASSERT_TRUE(Load().ok());
  const std::string truncated = bytes_.substr(0, bytes_.size() - 100);
  auto gguf = GgufFile::Parse(reinterpret_cast<const uint8_t*>(truncated.data()), truncated.size());
  ASSERT_FALSE(gguf.ok());
  EXPECT_NE(gguf.status().message().find("tensor 'blk.3.ffn_down.weight'"), std::string::npos)
      << gguf.status();
}

TEST_F(ModelRefusalTest, BadAlignment) {
  w().SetKv("general.alignment", GgufValue::U32(24));
  ExpectRefused({"general.alignment", "24"});
}

}  // namespace
}  // namespace walsh
