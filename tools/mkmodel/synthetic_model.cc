#include "tools/mkmodel/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/block_types.h"
#include "kernels/float_convert.h"
#include "kernels/hadamard_ref.h"
#include "kernels/ternary_codec_ref.h"
#include "kernels/weight_format.h"
#include "tools/mkmodel/hf_tokenizer.h"
#include "tools/mkmodel/real_signs.h"
#include "tools/mkmodel/rng.h"
#include "tools/mkmodel/synthetic_vocab.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_keys.h"

namespace walsh {
namespace {

constexpr int kBlock = kTernaryBlockElems;

bool EndsWith(const std::string& s, const char* suffix) { return absl::EndsWith(s, suffix); }

// Gain of a matmul weight's per-block scale, relative to sqrt(1.5 / n_in): residual-stream
// writers are damped so a random deep stack stays numerically tame.
double WeightGain(const std::string& name) {
  if (name == "output.weight") return 2.0;
  if (EndsWith(name, ".ssm_out.weight") || EndsWith(name, ".attn_output.weight") ||
      EndsWith(name, ".ffn_down.weight")) {
    return 0.3;
  }
  return 1.0;
}

uint64_t TensorSeed(uint64_t seed, const std::string& name) { return Mix64(seed ^ HashName(name)); }

// Ternary codes (0, 1, 2 = -1, 0, +1) and fp16 scales of one row. Every block has at least
// one nonzero code, so its scale is the block's max |w| and the reference quantizer is exact.
// The codes come out in PQ2_0's sequential 2-bit layout, 32 per 64-bit word.
struct TernaryRow {
  std::vector<uint64_t> words;  // 4 per block
  std::vector<uint16_t> scales;
};

void GenerateTernaryRow(uint64_t tensor_seed, uint64_t row, int64_t n_in, const std::string& name,
                        TernaryRow* out) {
  Rng rng(tensor_seed + row * 0x632be59bd9b4e019ull);
  const int64_t blocks = n_in / kBlock;
  out->words.resize(blocks * 4);
  out->scales.resize(blocks);
  const bool embedding = name == "token_embd.weight";
  const double base =
      embedding ? 0.8 : WeightGain(name) * std::sqrt(1.5 / static_cast<double>(n_in));
  for (int64_t b = 0; b < blocks; ++b) {
    out->scales[b] = FloatToFp16(static_cast<float>(base * std::exp(0.25 * rng.Normal())));
    uint64_t any_nonzero = 0;
    for (int w = 0; w < 4; ++w) {
      uint64_t x = rng.Next();
      const uint64_t both = x & (x >> 1) & 0x5555555555555555ull;  // fields equal to 3
      x ^= both << 1;                                              // 3 (11) -> 1 (01): zero
      out->words[b * 4 + w] = x;
      any_nonzero |= x ^ 0x5555555555555555ull;
    }
    if (any_nonzero == 0) out->words[b * 4] ^= 3;  // element 0: code 1 -> 2 (+1)
  }
}

uint8_t CodeAt(const TernaryRow& r, int64_t j) { return (r.words[j >> 5] >> (2 * (j & 31))) & 3; }

void PackRow(const TernaryRow& r, TernaryFormat format, uint8_t* out) {
  const int64_t blocks = static_cast<int64_t>(r.scales.size());
  for (int64_t b = 0; b < blocks; ++b) {
    switch (format) {
      case TernaryFormat::kPq2_0: {
        auto* blk = reinterpret_cast<block_pq2_0*>(out) + b;
        blk->d = r.scales[b];
        std::memcpy(blk->qs, &r.words[b * 4], 32);  // little-endian words are the qs layout
        break;
      }
      case TernaryFormat::kPtq1_0: {
        uint8_t trits[kBlock];
        for (int j = 0; j < kBlock; ++j) trits[j] = CodeAt(r, b * kBlock + j);
        PackBlockPtq1_0(trits, r.scales[b], reinterpret_cast<block_ptq1_0*>(out) + b);
        break;
      }
    }
  }
}

void DecodeRow(const TernaryRow& r, float* out) {
  for (size_t b = 0; b < r.scales.size(); ++b) {
    const float d = Fp16ToFloat(r.scales[b]);
    for (int j = 0; j < kBlock; ++j) {
      out[b * kBlock + j] = static_cast<float>(CodeAt(r, b * kBlock + j) - 1) * d;
    }
  }
}

// Values of a small float tensor (norms, conv taps, gates, alpha/beta), drawn per tensor.
std::vector<float> FloatTensorValues(uint64_t tensor_seed, const GgufTensorSpec& spec) {
  uint64_t n = 1;
  for (uint64_t d : spec.ne) n *= d;
  Rng rng(tensor_seed);
  std::vector<float> v(n);
  const std::string& name = spec.name;
  for (uint64_t i = 0; i < n; ++i) {
    const double z = rng.Normal();
    double x;
    if (EndsWith(name, ".ssm_a")) {
      x = -std::exp(0.5 * z);  // stores -exp(A_log): always negative
    } else if (EndsWith(name, ".ssm_dt.bias")) {
      x = 0.5 * z;
    } else if (EndsWith(name, ".ssm_conv1d.weight")) {
      x = 0.5 * z;
    } else if (EndsWith(name, ".ssm_alpha.weight") || EndsWith(name, ".ssm_beta.weight")) {
      x = z / std::sqrt(static_cast<double>(spec.ne[0]));
    } else {
      x = 1.0 + 0.1 * z;  // norms, stored as 1 + w
    }
    v[i] = static_cast<float>(x);
  }
  return v;
}

bool IsTernary(const GgufTensorSpec& spec) { return FindTernaryFormat(spec.type) != nullptr; }

// Writes `bytes` rows at a time so multi-gigabyte tensors stream through a small buffer.
absl::Status StreamRows(const GgufTensorSpec& spec, size_t row_bytes,
                        const std::function<void(uint64_t row, uint8_t* out)>& make_row,
                        GgufByteSink& sink) {
  const uint64_t rows = spec.ne.size() > 1 ? spec.ne[1] : 1;
  const uint64_t rows_per_chunk = std::max<uint64_t>(1, (size_t{4} << 20) / row_bytes);
  std::vector<uint8_t> buf(rows_per_chunk * row_bytes);
  for (uint64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
    const uint64_t n = std::min(rows_per_chunk, rows - r0);
    for (uint64_t r = 0; r < n; ++r) make_row(r0 + r, buf.data() + r * row_bytes);
    RETURN_IF_ERROR(sink.Write(buf.data(), n * row_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SyntheticModel>> SyntheticModel::Create(
    const SyntheticModelOptions& opts) {
  std::unique_ptr<SyntheticModel> m(new SyntheticModel());
  m->opts_ = opts;
  ASSIGN_OR_RETURN(m->preset_, FindPreset(opts.preset));
  Qwen35Config& c = m->preset_.config;
  if (opts.layers < 0 || opts.layers > c.block_count) {
    return absl::InvalidArgumentError(absl::StrCat("--layers must be 1..", c.block_count));
  }
  if (opts.layers > 0) c.block_count = opts.layers;
  SyntheticVocab vocab;
  std::string pre = "qwen35";
  if (!opts.tokenizer_json.empty()) {
    ASSIGN_OR_RETURN(vocab, LoadHfTokenizerJson(opts.tokenizer_json));
    c.vocab_size = static_cast<int64_t>(vocab.tokens.size());
    pre = "qwen2";
  } else {
    vocab = BuildSyntheticVocab(m->preset_.regular_tokens, c.vocab_size);
  }
  const uint32_t qtype = FormatTraits(opts.format).ggml_type;

  // Tensor table, from the same inventory the loader checks against.
  GgufWriter& w = m->writer_;
  for (const ExpectedTensor& e : Qwen35Inventory(c, /*with_output=*/true)) {
    uint32_t type = kGgmlF32;
    if (e.cls == TensorClass::kProjection) type = qtype;
    if (e.cls == TensorClass::kDenseProjection) type = kGgmlBf16;
    RETURN_IF_ERROR(w.AddTensor(e.name, e.ne, type));
  }

  // The fold: every ternary weight but the embedding, which is a rotated lookup table.
  SyntheticFold& fold = m->fold_;
  fold.block_size = m->preset_.block_size;
  fold.gdn = {c.ssm_group_count, c.ssm_time_step_rank / c.ssm_group_count, c.ssm_state_size};
  for (const GgufTensorSpec& t : w.tensors()) {
    if (IsTernary(t) && t.name != "token_embd.weight") fold.folded_names.push_back(t.name);
  }
  std::vector<int64_t> widths = {c.embedding_length};
  for (int64_t width : {c.ssm_inner_size, c.head_count * c.value_length, c.feed_forward_length}) {
    if (std::find(widths.begin(), widths.end(), width) == widths.end()) widths.push_back(width);
  }
  if (opts.signs == SignSource::kReal) {
    const std::string path =
        opts.real_signs_path.empty() ? DefaultReleasedHadamardPath() : opts.real_signs_path;
    ASSIGN_OR_RETURN(ReleasedHadamard real, LoadReleasedHadamard(path));
    if (real.block_size != fold.block_size || real.sign_widths != widths) {
      return absl::InvalidArgumentError(
          absl::StrCat("--signs real needs the widths of the released 27B model; preset \"",
                       opts.preset, "\" has other widths"));
    }
    fold.signs = std::move(real.signs);
  } else {
    Rng rng(Mix64(opts.seed ^ HashName(gguf_keys::kPrismHadamardSignValues)));
    for (int64_t width : widths) {
      std::vector<int8_t>& s = fold.signs[width];
      for (int64_t i = 0; i < width; ++i) s.push_back((rng.Next() >> 63) ? 1 : -1);
    }
  }

  const ModelPreset& p = m->preset_;
  w.SetKv(gguf_keys::kGeneralArchitecture, GgufValue::String("qwen35"));
  w.SetKv(gguf_keys::kGeneralName, GgufValue::String(absl::StrCat("walsh synthetic ", p.name)));
  w.SetKv(gguf_keys::kGeneralAlignment, GgufValue::U32(32));
  if (qtype == kGgmlPq2_0) w.SetKv(gguf_keys::kGeneralFileType, GgufValue::U32(141));
  w.SetKv(gguf_keys::kGeneralWalshSyntheticSeed, GgufValue::Uint(GgufType::kUint64, opts.seed));
  WriteQwen35Config(c, w);

  w.SetKv(gguf_keys::kPrismHadamardVersion, GgufValue::U32(1));
  w.SetKv(gguf_keys::kPrismHadamardBlockSize, GgufValue::U32(fold.block_size));
  w.SetKv(gguf_keys::kPrismHadamardTransform, GgufValue::String(kPrismTransform));
  w.SetKv(gguf_keys::kPrismHadamardAxis, GgufValue::String(kPrismAxis));
  w.SetKv(gguf_keys::kPrismHadamardSignMode, GgufValue::String("explicit"));
  std::vector<int32_t> widths32(widths.begin(), widths.end()), values;
  for (int64_t width : widths) {
    for (int8_t s : fold.signs[width]) values.push_back(s);
  }
  w.SetKv(gguf_keys::kPrismHadamardSignWidths, GgufValue::I32Array(widths32));
  w.SetKv(gguf_keys::kPrismHadamardSignValues, GgufValue::I32Array(values));
  w.SetKv(gguf_keys::kPrismHadamardWeightNames, GgufValue::StringArray(fold.folded_names));
  w.SetKv(gguf_keys::kPrismHadamardInverseWeightNames,
          GgufValue::StringArray({"token_embd.weight"}));
  w.SetKv(gguf_keys::kPrismHadamardGdnVGrouped, GgufValue::Bool(true));

  w.SetKv(gguf_keys::kTokenizerGgmlModel, GgufValue::String("gpt2"));
  w.SetKv(gguf_keys::kTokenizerGgmlPre, GgufValue::String(pre));
  w.SetKv(gguf_keys::kTokenizerGgmlTokens, GgufValue::StringArray(vocab.tokens));
  w.SetKv(gguf_keys::kTokenizerGgmlTokenType, GgufValue::I32Array(vocab.token_types));
  w.SetKv(gguf_keys::kTokenizerGgmlMerges, GgufValue::StringArray(vocab.merges));
  w.SetKv(gguf_keys::kTokenizerGgmlBosTokenId, GgufValue::U32(vocab.endoftext_id));
  w.SetKv(gguf_keys::kTokenizerGgmlEosTokenId, GgufValue::U32(vocab.im_end_id));
  w.SetKv(gguf_keys::kTokenizerGgmlPaddingTokenId, GgufValue::U32(vocab.pad_id));
  w.SetKv(gguf_keys::kTokenizerGgmlAddBosToken, GgufValue::Bool(false));
  w.SetKv(gguf_keys::kTokenizerChatTemplate, GgufValue::String(ChatMlTemplate()));
  return m;
}

GgufWriter::TensorFiller SyntheticModel::PackedFiller() const {
  return [this](size_t, const GgufTensorSpec& spec, GgufByteSink& sink) -> absl::Status {
    const uint64_t seed = TensorSeed(opts_.seed, spec.name);
    if (IsTernary(spec)) {
      const GgmlTypeInfo* info = FindGgmlType(spec.type);
      const size_t row_bytes = spec.ne[0] / kBlock * info->block_bytes;
      TernaryRow row;
      return StreamRows(
          spec, row_bytes,
          [&](uint64_t r, uint8_t* out) {
            GenerateTernaryRow(seed, r, spec.ne[0], spec.name, &row);
            PackRow(row, FindTernaryFormat(spec.type)->format, out);
          },
          sink);
    }
    const std::vector<float> v = FloatTensorValues(seed, spec);
    if (spec.type == kGgmlBf16) {
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = FloatToBf16(v[i]);
      return sink.Write(b.data(), b.size() * 2);
    }
    return sink.Write(v.data(), v.size() * 4);
  };
}

void SyntheticModel::DecodeStoredRow(const GgufTensorSpec& spec, uint64_t row, float* out) const {
  TernaryRow r;
  GenerateTernaryRow(TensorSeed(opts_.seed, spec.name), row, spec.ne[0], spec.name, &r);
  DecodeRow(r, out);
}

absl::Status SyntheticModel::WritePacked(const std::string& path) const {
  return writer_.WriteFile(path, PackedFiller());
}

absl::Status SyntheticModel::WriteDense(const std::string& path) const {
  if (preset_.name == "27b") {
    return absl::InvalidArgumentError(
        "--dense-out is for the tiny and small presets; the 27B shape would need ~100 GB");
  }
  GgufWriter dense;
  for (const auto& [key, value] : writer_.kvs()) {
    if (!absl::StartsWith(key, gguf_keys::kPrismHadamardPrefix) &&
        key != gguf_keys::kGeneralFileType) {
      dense.SetKv(key, value);
    }
  }
  dense.SetKv(gguf_keys::kGeneralWalshDenseReference, GgufValue::Bool(true));
  for (const GgufTensorSpec& t : writer_.tensors()) {
    RETURN_IF_ERROR(dense.AddTensor(t.name, t.ne, kGgmlF32));
  }
  const auto& tensors = writer_.tensors();
  return dense.WriteFile(path, [&](size_t i, const GgufTensorSpec& spec, GgufByteSink& sink) {
    const GgufTensorSpec& packed = tensors[i];
    if (!IsTernary(packed)) {
      std::vector<float> v = FloatTensorValues(TensorSeed(opts_.seed, spec.name), spec);
      if (packed.type == kGgmlBf16) {
        for (float& x : v) x = Bf16ToFloat(FloatToBf16(x));  // the values the packed file holds
      }
      return sink.Write(v.data(), v.size() * 4);
    }
    const int64_t n = static_cast<int64_t>(spec.ne[0]);
    const int8_t* signs = fold_.signs.at(n).data();
    const bool permuted = EndsWith(spec.name, ".ssm_out.weight");
    std::vector<float> stored(n), tmp(n);
    return StreamRows(
        spec, n * sizeof(float),
        [&](uint64_t r, uint8_t* out) {
          DecodeStoredRow(packed, r, stored.data());
          float* plain = reinterpret_cast<float*>(out);
          if (spec.name == "token_embd.weight") {
            // Stored rows are T(s ⊙ e): the real embedding is e = s ⊙ T(stored).
            SignedFwhtInverseRef(stored.data(), signs, n, fold_.block_size, plain);
            return;
          }
          // W_plain = W_stored · T · diag(s) · P, row by row (T is symmetric).
          SignedFwhtInverseRef(stored.data(), signs, n, fold_.block_size, tmp.data());
          if (permuted) {
            GdnUnpermuteRef(tmp.data(), fold_.gdn.n_k, fold_.gdn.rep, fold_.gdn.hd, plain);
          } else {
            std::memcpy(plain, tmp.data(), n * sizeof(float));
          }
        },
        sink);
  });
}

}  // namespace walsh
