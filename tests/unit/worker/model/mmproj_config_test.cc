// The vision projector's file (docs/vision.md §1): synthetic projectors of every preset load and
// feed their text model; the 27b preset has the released projector's tensors and shapes; and
// every mutation walsh does not implement is refused, naming the key or tensor.
#include "worker/model/mmproj_config.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_mmproj.h"
#include "worker/model/gguf_file.h"
#include "worker/model/gguf_keys.h"

namespace walsh {
namespace {

// Parses what the writer holds (the tensors' bytes from the synthetic filler) and checks it as a
// projector for a text model of hidden size `text_hidden`.
absl::Status Check(const GgufWriter& w, int64_t text_hidden) {
  auto bytes = w.WriteString(SyntheticMmprojFiller(7));
  if (!bytes.ok()) return bytes.status();
  auto gguf = GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  if (!gguf.ok()) return gguf.status();
  auto config = ParseMmprojConfig(**gguf);
  if (!config.ok()) return config.status();
  if (absl::Status s = CheckMmprojInventory(**gguf, *config); !s.ok()) return s;
  return CheckMmprojFitsText(*config, text_hidden);
}

GgufWriter TinyWriter(uint32_t weight_type = kGgmlF16) {
  auto w = SyntheticMmprojWriter(
      {.preset = "tiny", .text_embedding_length = 256, .weight_type = weight_type});
  EXPECT_TRUE(w.ok()) << w.status();
  return std::move(*w);
}

// Replaces tensor `name`'s declaration (shape or type), keeping the others in order.
void Redeclare(GgufWriter& w, const std::string& name, std::vector<uint64_t> ne, uint32_t type) {
  GgufWriter copy;
  for (const auto& [key, value] : w.kvs()) copy.SetKv(key, value);
  for (const GgufTensorSpec& t : w.tensors()) {
    const bool target = t.name == name;
    ASSERT_TRUE(copy.AddTensor(t.name, target ? ne : t.ne, target ? type : t.type).ok()) << name;
  }
  w = std::move(copy);
}

GgufValue FloatArray(std::vector<float> v) {
  std::vector<GgufValue> e;
  for (float x : v) e.push_back(GgufValue::F32(x));
  return GgufValue::Array(GgufType::kFloat32, std::move(e));
}

TEST(MmprojConfig, EveryPresetLoadsAndFeedsItsTextModel) {
  for (const char* preset : {"tiny", "small"}) {
    for (uint32_t type : {kGgmlF32, kGgmlF16, kGgmlBf16}) {
      SCOPED_TRACE(std::string(preset) + " " + GgmlTypeName(type));
      auto w = SyntheticMmprojWriter(
          {.preset = preset, .text_embedding_length = 320, .weight_type = type});
      ASSERT_TRUE(w.ok()) << w.status();
      EXPECT_TRUE(Check(*w, 320).ok()) << Check(*w, 320);
      const absl::Status other = Check(*w, 384);
      EXPECT_TRUE(absl::StrContains(other.message(), gguf_keys::kClipVisionProjectionDim)) << other;
    }
  }
}

TEST(MmprojConfig, TheReleasedProjectorsShape) {
  auto c = MmprojPresetConfig("27b", 5120);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim(), 72);
  EXPECT_EQ(c->position_side(), 48);
  EXPECT_EQ(c->merged_width(), 4608);
  const std::vector<ExpectedVisionTensor> inventory = MmprojInventory(*c);
  EXPECT_EQ(inventory.size(), 334u);
  auto shape = [&](const std::string& name) {
    for (const auto& e : inventory) {
      if (e.name == name) return e.ne;
    }
    return std::vector<uint64_t>{};
  };
  EXPECT_EQ(shape("v.patch_embd.weight.1"), (std::vector<uint64_t>{16, 16, 3, 1152}));
  EXPECT_EQ(shape("v.position_embd.weight"), (std::vector<uint64_t>{1152, 2304}));
  EXPECT_EQ(shape("v.blk.26.attn_qkv.weight"), (std::vector<uint64_t>{1152, 3456}));
  EXPECT_EQ(shape("v.blk.26.ffn_down.weight"), (std::vector<uint64_t>{4304, 1152}));
  EXPECT_EQ(shape("mm.0.weight"), (std::vector<uint64_t>{4608, 4608}));
  EXPECT_EQ(shape("mm.2.weight"), (std::vector<uint64_t>{4608, 5120}));
}

TEST(MmprojConfig, WhatWalshDoesNotImplementIsRefusedByName) {
  struct Mutation {
    std::string needle;  // the key or tensor the refusal must name
    std::function<void(GgufWriter&)> apply;
  };
  const std::vector<Mutation> mutations = {
      {gguf_keys::kGeneralArchitecture,
       [](GgufWriter& w) {
         w.SetKv(gguf_keys::kGeneralArchitecture, GgufValue::String("qwen35"));
       }},
      {gguf_keys::kClipProjectorType,
       [](GgufWriter& w) { w.SetKv(gguf_keys::kClipProjectorType, GgufValue::String("mlp")); }},
      {gguf_keys::kClipHasVisionEncoder,
       [](GgufWriter& w) { w.RemoveKv(gguf_keys::kClipHasVisionEncoder); }},
      {gguf_keys::kClipHasAudioEncoder,
       [](GgufWriter& w) { w.SetKv(gguf_keys::kClipHasAudioEncoder, GgufValue::Bool(true)); }},
      {gguf_keys::kClipUseGelu,
       [](GgufWriter& w) { w.SetKv(gguf_keys::kClipUseGelu, GgufValue::Bool(false)); }},
      {gguf_keys::kClipVisionProjectorType,
       [](GgufWriter& w) {
         w.SetKv(gguf_keys::kClipVisionProjectorType, GgufValue::String("mlp"));
       }},
      {gguf_keys::kClipUseSilu,
       [](GgufWriter& w) { w.SetKv(gguf_keys::kClipUseSilu, GgufValue::Bool(true)); }},
      {gguf_keys::kClipHasTextEncoder,
       [](GgufWriter& w) { w.SetKv(gguf_keys::kClipHasTextEncoder, GgufValue::Bool(true)); }},
      {"has 1 entries, expected block_count 2",
       [](GgufWriter& w) {
         w.SetKv(gguf_keys::kClipVisionIsDeepstackLayers,
                 GgufValue::Array(GgufType::kBool, {GgufValue::Bool(false)}));
       }},
      {"entry 1 is 1e-300, not a positive float",
       [](GgufWriter& w) {
         w.SetKv(gguf_keys::kClipVisionImageStd,
                 GgufValue::Array(GgufType::kFloat64, {GgufValue::Float(GgufType::kFloat64, 0.5),
                                                       GgufValue::Float(GgufType::kFloat64, 1e-300),
                                                       GgufValue::Float(GgufType::kFloat64, 0.5)}));
       }},
      {gguf_keys::kClipVisionNWaPattern,
       [](GgufWriter& w) { w.SetKv(gguf_keys::kClipVisionNWaPattern, GgufValue::U32(4)); }},
      {"clip.vision.feature_layer",
       [](GgufWriter& w) { w.SetKv("clip.vision.feature_layer", GgufValue::I32Array({-1})); }},
      {gguf_keys::kPrismHadamardVersion,
       [](GgufWriter& w) { w.SetKv(gguf_keys::kPrismHadamardVersion, GgufValue::U32(1)); }},
      {gguf_keys::kClipVisionIsDeepstackLayers,
       [](GgufWriter& w) {
         w.SetKv(
             gguf_keys::kClipVisionIsDeepstackLayers,
             GgufValue::Array(GgufType::kBool, {GgufValue::Bool(false), GgufValue::Bool(true)}));
       }},
      {gguf_keys::kClipVisionSpatialMergeSize,
       [](GgufWriter& w) { w.SetKv(gguf_keys::kClipVisionSpatialMergeSize, GgufValue::U32(3)); }},
      {gguf_keys::kClipVisionImageStd,
       [](GgufWriter& w) {
         w.SetKv(gguf_keys::kClipVisionImageStd, FloatArray({0.5f, 0, 0.5f}));
       }},
      {gguf_keys::kClipVisionImageMean,
       [](GgufWriter& w) {
         w.SetKv(gguf_keys::kClipVisionImageMean, FloatArray({0.5f, 0.5f}));
       }},
      {gguf_keys::kClipVisionPatchSize,
       [](GgufWriter& w) { w.RemoveKv(gguf_keys::kClipVisionPatchSize); }},
      {gguf_keys::kClipVisionImageSize,
       [](GgufWriter& w) { w.SetKv(gguf_keys::kClipVisionImageSize, GgufValue::U32(72)); }},
      {gguf_keys::kClipVisionAttentionHeadCount,
       [](GgufWriter& w) { w.SetKv(gguf_keys::kClipVisionAttentionHeadCount, GgufValue::U32(3)); }},
      {gguf_keys::kClipVisionAttentionLayerNormEpsilon,
       [](GgufWriter& w) {
         w.SetKv(gguf_keys::kClipVisionAttentionLayerNormEpsilon, GgufValue::F32(0));
       }},
      {"missing tensor 'v.blk.1.ffn_up.weight'",
       [](GgufWriter& w) {
         auto& t = w.mutable_tensors();
         t.erase(std::find_if(t.begin(), t.end(),
                              [](const auto& s) { return s.name == "v.blk.1.ffn_up.weight"; }));
       }},
      {"tensor 'v.blk.0.attn_qkv.weight' has shape",
       [](GgufWriter& w) {
         Redeclare(w, "v.blk.0.attn_qkv.weight", {64, 128}, kGgmlF16);
       }},
      {"tensor 'v.position_embd.weight' has type F16",
       [](GgufWriter& w) {
         Redeclare(w, "v.position_embd.weight", {64, 16}, kGgmlF16);
       }},
      {"tensor 'mm.0.bias' has type F16",
       [](GgufWriter& w) { Redeclare(w, "mm.0.bias", {256}, kGgmlF16); }},
      {"unexpected tensor 'v.deepstack.1.fc1.weight'",
       [](GgufWriter& w) {
         ASSERT_TRUE(w.AddTensor("v.deepstack.1.fc1.weight", {256, 256}, kGgmlF16).ok());
       }},
  };
  ASSERT_TRUE(Check(TinyWriter(), 256).ok());
  for (const Mutation& m : mutations) {
    SCOPED_TRACE(m.needle);
    GgufWriter w = TinyWriter();
    m.apply(w);
    const absl::Status s = Check(w, 256);
    ASSERT_FALSE(s.ok()) << "accepted";
    EXPECT_TRUE(absl::StrContains(s.message(), m.needle)) << s;
  }
}

TEST(MmprojConfig, AWrittenFileReadsBack) {
  testing::TempDir dir;
  const std::string path = dir.File("tiny.mmproj.gguf");
  ASSERT_TRUE(WriteSyntheticMmproj({.preset = "tiny", .text_embedding_length = 256}, path).ok());
  auto gguf = GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto config = ParseMmprojConfig(**gguf);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(CheckMmprojInventory(**gguf, *config).ok());
  EXPECT_EQ(config->image_mean[1], 0.5f);
  EXPECT_EQ(config->projection_dim, 256);
}

}  // namespace
}  // namespace walsh
