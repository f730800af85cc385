// The mmproj file's keys and tensors (docs/vision.md §1).
#include "worker/model/mmproj_config.h"

#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_keys.h"
#include "worker/model/gguf_writer.h"
#include "worker/model/tensor_table_check.h"

namespace walsh {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 20;

// The clip.* keys walsh understands; any other is refused so nothing changes the math unseen.
constexpr const char* kKnownProjectorKeys[] = {
    gguf_keys::kClipHasAudioEncoder,
    gguf_keys::kClipHasTextEncoder,
    gguf_keys::kClipHasVisionEncoder,
    gguf_keys::kClipProjectorType,
    gguf_keys::kClipUseGelu,
    gguf_keys::kClipUseSilu,
    gguf_keys::kClipVisionAttentionHeadCount,
    gguf_keys::kClipVisionAttentionLayerNormEpsilon,
    gguf_keys::kClipVisionBlockCount,
    gguf_keys::kClipVisionEmbeddingLength,
    gguf_keys::kClipVisionFeedForwardLength,
    gguf_keys::kClipVisionImageMean,
    gguf_keys::kClipVisionImageSize,
    gguf_keys::kClipVisionImageStd,
    gguf_keys::kClipVisionIsDeepstackLayers,
    gguf_keys::kClipVisionPatchSize,
    gguf_keys::kClipVisionProjectionDim,
    gguf_keys::kClipVisionProjectorType,
    gguf_keys::kClipVisionSpatialMergeSize,
};

absl::Status CheckKeySet(const GgufFile& file) {
  absl::flat_hash_set<std::string> known;
  for (const char* k : kKnownProjectorKeys) known.insert(k);
  for (const auto& [key, value] : file.kvs()) {
    if (absl::StartsWith(key, gguf_keys::kPrismHadamardPrefix)) {
      return GgufKeyError(
          key, "is a Hadamard contract on a vision projector, which walsh does not know");
    }
    if (key == gguf_keys::kClipVisionNWaPattern) {
      return GgufKeyError(key, "asks for windowed attention, which qwen3vl_merger does not use");
    }
    if (absl::StartsWith(key, gguf_keys::kClipPrefix) && !known.contains(key)) {
      return GgufKeyError(key, absl::StrCat("(value ", value.DebugString(),
                                            ") is not part of the projector walsh implements"));
    }
  }
  return absl::OkStatus();
}

// A bool key that must have `required` when present (or always, when `must_exist`).
absl::Status RequireBool(const GgufFile& file, const char* key, bool required, bool must_exist) {
  if (file.FindKey(key) == nullptr && !must_exist) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool value, file.GetBool(key));
  if (value != required)
    return GgufKeyError(key, absl::StrCat("is ", value ? "true" : "false", "; walsh needs ",
                                          required ? "true" : "false"));
  return absl::OkStatus();
}

absl::StatusOr<std::array<float, 3>> ReadRgb(const GgufFile& file, const char* key, bool positive) {
  ASSIGN_OR_RETURN(std::vector<double> v, file.GetFloatArray(key));
  if (v.size() != 3)
    return GgufKeyError(key, absl::StrCat("has ", v.size(), " entries, expected 3"));
  std::array<float, 3> out;
  for (int c = 0; c < 3; ++c) {
    // Checked as stored: a FLOAT64 entry may not survive the narrowing (1e-300 becomes 0).
    out[c] = static_cast<float>(v[c]);
    if (!std::isfinite(out[c]) || (positive && !(out[c] > 0))) {
      return GgufKeyError(key, absl::StrCat("entry ", c, " is ", v[c],
                                            positive ? ", not a positive float" : ", not a float"));
    }
  }
  return out;
}

// clip.projector_type, or clip.vision.projector_type in older files; where both are present,
// both must name the projector.
absl::Status CheckProjectorType(const GgufFile& file) {
  std::vector<const char*> keys;
  for (const char* key : {gguf_keys::kClipProjectorType, gguf_keys::kClipVisionProjectorType}) {
    if (file.FindKey(key) != nullptr) keys.push_back(key);
  }
  if (keys.empty()) keys.push_back(gguf_keys::kClipProjectorType);  // missing: say so by name
  for (const char* key : keys) {
    ASSIGN_OR_RETURN(std::string type, file.GetString(key));
    if (type != kQwen3VlMerger) {
      return GgufKeyError(
          key, absl::StrCat("is \"", type, "\"; walsh implements only \"", kQwen3VlMerger, "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDeepstack(const GgufFile& file, int64_t block_count) {
  if (file.FindKey(gguf_keys::kClipVisionIsDeepstackLayers) == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<bool> layers,
                   file.GetBoolArray(gguf_keys::kClipVisionIsDeepstackLayers));
  if (static_cast<int64_t>(layers.size()) != block_count) {
    return GgufKeyError(
        gguf_keys::kClipVisionIsDeepstackLayers,
        absl::StrCat("has ", layers.size(), " entries, expected block_count ", block_count));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i]) {
      return GgufKeyError(
          gguf_keys::kClipVisionIsDeepstackLayers,
          absl::StrCat("marks layer ", i,
                       " as a deepstack layer; Qwen3.5's projector has none and walsh "
                       "does not implement them"));
    }
  }
  return absl::OkStatus();
}

bool TypeAllowed(const ExpectedVisionTensor& e, uint32_t type) {
  if (type == kGgmlF32) return true;
  if (e.cls == VisionTensorClass::kF32) return false;
  return type == kGgmlF16 || type == kGgmlBf16 || (type == kGgmlQ8_0 && e.ne[0] % 32 == 0);
}

}  // namespace

absl::StatusOr<MmprojConfig> ParseMmprojConfig(const GgufFile& file) {
  ASSIGN_OR_RETURN(std::string arch, file.GetString(gguf_keys::kGeneralArchitecture));
  if (arch != "clip") {
    return GgufKeyError(gguf_keys::kGeneralArchitecture,
                        absl::StrCat("is \"", arch, "\"; a vision projector file is \"clip\""));
  }
  RETURN_IF_ERROR(CheckKeySet(file));
  RETURN_IF_ERROR(RequireBool(file, gguf_keys::kClipHasVisionEncoder, true, true));
  RETURN_IF_ERROR(RequireBool(file, gguf_keys::kClipHasAudioEncoder, false, false));
  RETURN_IF_ERROR(RequireBool(file, gguf_keys::kClipHasTextEncoder, false, false));
  RETURN_IF_ERROR(CheckProjectorType(file));
  RETURN_IF_ERROR(RequireBool(file, gguf_keys::kClipUseGelu, true, true));
  RETURN_IF_ERROR(RequireBool(file, gguf_keys::kClipUseSilu, false, false));

  MmprojConfig c;
  ASSIGN_OR_RETURN(c.patch_size, file.GetInt(gguf_keys::kClipVisionPatchSize, 1, 1024));
  ASSIGN_OR_RETURN(c.image_size, file.GetInt(gguf_keys::kClipVisionImageSize, 1, 65536));
  ASSIGN_OR_RETURN(c.embedding_length,
                   file.GetInt(gguf_keys::kClipVisionEmbeddingLength, 1, kMaxDim));
  ASSIGN_OR_RETURN(c.feed_forward_length,
                   file.GetInt(gguf_keys::kClipVisionFeedForwardLength, 1, kMaxDim));
  ASSIGN_OR_RETURN(c.block_count, file.GetInt(gguf_keys::kClipVisionBlockCount, 1, 1024));
  ASSIGN_OR_RETURN(c.head_count, file.GetInt(gguf_keys::kClipVisionAttentionHeadCount, 1, 1024));
  ASSIGN_OR_RETURN(double eps, file.GetFloat(gguf_keys::kClipVisionAttentionLayerNormEpsilon));
  ASSIGN_OR_RETURN(c.projection_dim, file.GetInt(gguf_keys::kClipVisionProjectionDim, 1, kMaxDim));
  ASSIGN_OR_RETURN(c.image_mean, ReadRgb(file, gguf_keys::kClipVisionImageMean, false));
  ASSIGN_OR_RETURN(c.image_std, ReadRgb(file, gguf_keys::kClipVisionImageStd, true));
  if (file.FindKey(gguf_keys::kClipVisionSpatialMergeSize) != nullptr) {
    ASSIGN_OR_RETURN(c.spatial_merge_size,
                     file.GetInt(gguf_keys::kClipVisionSpatialMergeSize, 1, 64));
  }
  RETURN_IF_ERROR(CheckDeepstack(file, c.block_count));

  c.layer_norm_epsilon = static_cast<float>(eps);  // checked as stored
  if (!(c.layer_norm_epsilon > 0 && c.layer_norm_epsilon < 1)) {
    return GgufKeyError(gguf_keys::kClipVisionAttentionLayerNormEpsilon,
                        absl::StrCat("is ", eps, ", not a float in (0, 1)"));
  }
  if (c.image_size % c.patch_size != 0) {
    return GgufKeyError(
        gguf_keys::kClipVisionImageSize,
        absl::StrCat("is ", c.image_size, ", not a multiple of patch_size ", c.patch_size));
  }
  // The 2D rotary positions split each head into four quarters: two for rows, two for columns.
  if (c.embedding_length % c.head_count != 0 || c.head_dim() % 4 != 0) {
    return GgufKeyError(gguf_keys::kClipVisionAttentionHeadCount,
                        absl::StrCat("is ", c.head_count, "; embedding_length ", c.embedding_length,
                                     " must split into heads of a multiple of 4"));
  }
  if (c.spatial_merge_size != 2) {
    return GgufKeyError(gguf_keys::kClipVisionSpatialMergeSize,
                        absl::StrCat("is ", c.spatial_merge_size, "; qwen3vl_merger merges 2x2"));
  }
  return c;
}

std::vector<ExpectedVisionTensor> MmprojInventory(const MmprojConfig& c) {
  using U = uint64_t;
  const U d = c.embedding_length, f = c.feed_forward_length, p = c.patch_size;
  const U merged = c.merged_width(), out = c.projection_dim;
  const U positions = static_cast<U>(c.position_side() * c.position_side());
  std::vector<ExpectedVisionTensor> t;
  auto add = [&t](std::string name, std::vector<U> ne, VisionTensorClass cls) {
    t.push_back({std::move(name), std::move(ne), cls});
  };
  constexpr auto kW = VisionTensorClass::kWeight;
  constexpr auto kF = VisionTensorClass::kF32;
  add("v.patch_embd.weight", {p, p, 3, d}, kW);
  add("v.patch_embd.weight.1", {p, p, 3, d}, kW);
  add("v.patch_embd.bias", {d}, kF);
  add("v.position_embd.weight", {d, positions}, kF);
  for (int64_t i = 0; i < c.block_count; ++i) {
    const std::string b = absl::StrCat("v.blk.", i, ".");
    add(b + "ln1.weight", {d}, kF);
    add(b + "ln1.bias", {d}, kF);
    add(b + "attn_qkv.weight", {d, 3 * d}, kW);
    add(b + "attn_qkv.bias", {3 * d}, kF);
    add(b + "attn_out.weight", {d, d}, kW);
    add(b + "attn_out.bias", {d}, kF);
    add(b + "ln2.weight", {d}, kF);
    add(b + "ln2.bias", {d}, kF);
    add(b + "ffn_up.weight", {d, f}, kW);
    add(b + "ffn_up.bias", {f}, kF);
    add(b + "ffn_down.weight", {f, d}, kW);
    add(b + "ffn_down.bias", {d}, kF);
  }
  add("v.post_ln.weight", {d}, kF);
  add("v.post_ln.bias", {d}, kF);
  add("mm.0.weight", {merged, merged}, kW);
  add("mm.0.bias", {merged}, kF);
  add("mm.2.weight", {merged, out}, kW);
  add("mm.2.bias", {out}, kF);
  return t;
}

absl::Status CheckMmprojInventory(const GgufFile& file, const MmprojConfig& config) {
  return CheckTensorTable(
      file, MmprojInventory(config), TypeAllowed,
      [](const ExpectedVisionTensor& e) {
        return e.cls == VisionTensorClass::kF32 ? "F32"
                                                : "F32, F16, BF16 or Q8_0 (rows a multiple of 32)";
      },
      "not part of a qwen3vl_merger projector with these parameters (deepstack layers are not "
      "implemented)");
}

absl::Status CheckMmprojFitsText(const MmprojConfig& config, int64_t text_embedding_length) {
  if (config.projection_dim == text_embedding_length) return absl::OkStatus();
  return GgufKeyError(
      gguf_keys::kClipVisionProjectionDim,
      absl::StrCat("is ", config.projection_dim, ", but the text model's hidden size is ",
                   text_embedding_length));
}

void WriteMmprojConfig(const MmprojConfig& c, GgufWriter& w) {
  auto f32_array = [](const std::array<float, 3>& v) {
    std::vector<GgufValue> e;
    for (float x : v) e.push_back(GgufValue::F32(x));
    return GgufValue::Array(GgufType::kFloat32, std::move(e));
  };
  w.SetKv(gguf_keys::kGeneralArchitecture, GgufValue::String("clip"));
  w.SetKv(gguf_keys::kClipHasVisionEncoder, GgufValue::Bool(true));
  w.SetKv(gguf_keys::kClipProjectorType, GgufValue::String(kQwen3VlMerger));
  w.SetKv(gguf_keys::kClipUseGelu, GgufValue::Bool(true));
  w.SetKv(gguf_keys::kClipVisionProjectionDim, GgufValue::U32(c.projection_dim));
  w.SetKv(gguf_keys::kClipVisionImageSize, GgufValue::U32(c.image_size));
  w.SetKv(gguf_keys::kClipVisionPatchSize, GgufValue::U32(c.patch_size));
  w.SetKv(gguf_keys::kClipVisionEmbeddingLength, GgufValue::U32(c.embedding_length));
  w.SetKv(gguf_keys::kClipVisionFeedForwardLength, GgufValue::U32(c.feed_forward_length));
  w.SetKv(gguf_keys::kClipVisionBlockCount, GgufValue::U32(c.block_count));
  w.SetKv(gguf_keys::kClipVisionAttentionHeadCount, GgufValue::U32(c.head_count));
  w.SetKv(gguf_keys::kClipVisionAttentionLayerNormEpsilon, GgufValue::F32(c.layer_norm_epsilon));
  w.SetKv(gguf_keys::kClipVisionImageMean, f32_array(c.image_mean));
  w.SetKv(gguf_keys::kClipVisionImageStd, f32_array(c.image_std));
  w.SetKv(gguf_keys::kClipVisionSpatialMergeSize, GgufValue::U32(c.spatial_merge_size));
  std::vector<GgufValue> deepstack(c.block_count, GgufValue::Bool(false));
  w.SetKv(gguf_keys::kClipVisionIsDeepstackLayers,
          GgufValue::Array(GgufType::kBool, std::move(deepstack)));
}

}  // namespace walsh
