// walsh-mkmodel output read back through the model-file layer: identical metadata and tensor
// bytes for every preset, determinism, and the fold relation between packed and dense files.
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/hadamard_ref.h"
#include "kernels/ternary_codec_ref.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/real_signs.h"
#include "tools/mkmodel/synthetic_model.h"
#include "worker/model/ggml_types.h"
#include "worker/model/model_file.h"

namespace walsh {
namespace {

using testing::ReadFileOrDie;
using testing::RunProcess;
using testing::TempDir;
using testing::TestDataPath;

// Tensor bytes as the generator produces them, one tensor at a time.
class CaptureSink : public GgufByteSink {
 public:
  absl::Status Write(const void* data, size_t size) override {
    bytes.append(static_cast<const char*>(data), size);
    return absl::OkStatus();
  }
  std::string bytes;
};

void ExpectRoundTrip(const SyntheticModelOptions& opts) {
  auto model = SyntheticModel::Create(opts);
  ASSERT_TRUE(model.ok()) << model.status();
  TempDir dir;
  const std::string path = dir.File("model.gguf");
  ASSERT_TRUE((*model)->WritePacked(path).ok());
  auto loaded = LoadModelFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const GgufFile& g = *loaded->gguf;
  const GgufWriter& w = (*model)->writer();
  ASSERT_EQ(g.kvs().size(), w.kvs().size());
  for (size_t i = 0; i < w.kvs().size(); ++i) {
    EXPECT_EQ(g.kvs()[i].first, w.kvs()[i].first);
    EXPECT_TRUE(g.kvs()[i].second == w.kvs()[i].second) << w.kvs()[i].first;
  }
  ASSERT_EQ(g.tensors().size(), w.tensors().size());
  const GgufWriter::TensorFiller fill = (*model)->PackedFiller();
  for (size_t i = 0; i < w.tensors().size(); ++i) {
    const GgufTensorSpec& spec = w.tensors()[i];
    const GgufTensorInfo& t = g.tensors()[i];
    ASSERT_EQ(t.name, spec.name);
    ASSERT_EQ(t.ne, spec.ne);
    ASSERT_EQ(t.type, spec.type);
    CaptureSink sink;
    ASSERT_TRUE(fill(i, spec, sink).ok());
    ASSERT_EQ(sink.bytes.size(), t.n_bytes);
    ASSERT_EQ(0, std::memcmp(sink.bytes.data(), t.data, t.n_bytes)) << spec.name;
  }
  EXPECT_EQ(loaded->config.block_count, (*model)->preset().config.block_count);
}

TEST(MkmodelRoundTrip, Tiny) { ExpectRoundTrip({.preset = "tiny"}); }
TEST(MkmodelRoundTrip, TinyPtq1) {
  ExpectRoundTrip({.preset = "tiny", .format = TernaryFormat::kPtq1_0, .seed = 9});
}
TEST(MkmodelRoundTrip, Small) { ExpectRoundTrip({.preset = "small"}); }
TEST(MkmodelRoundTrip, Bonsai27bShape) {
  // The real 27B widths, names and sign vectors, with 4 layers instead of 64.
  ExpectRoundTrip(
      {.preset = "27b", .format = TernaryFormat::kPtq1_0, .signs = SignSource::kReal, .layers = 4});
}

TEST(MkmodelInventory, Bonsai27bMatchesTheReleasedFile) {
  auto model = SyntheticModel::Create({.preset = "27b", .signs = SignSource::kReal});
  ASSERT_TRUE(model.ok()) << model.status();
  // docs/format.md §4: 851 tensors, 402 ternary, 96 BF16, 353 F32.
  int ternary = 0, bf16 = 0, f32 = 0;
  uint64_t bytes = 0;
  for (const GgufTensorSpec& t : (*model)->writer().tensors()) {
    ternary += t.type == kGgmlPq2_0;
    bf16 += t.type == kGgmlBf16;
    f32 += t.type == kGgmlF32;
    bytes += t.n_bytes;
  }
  EXPECT_EQ((*model)->writer().tensors().size(), 851u);
  EXPECT_EQ(ternary, 402);
  EXPECT_EQ(bf16, 96);
  EXPECT_EQ(f32, 353);
  // Tensor data of the released PQ2_0 file: 7,206,168,928 - 11,120,992 header bytes, less at
  // most 31 padding bytes per tensor (ours has a different tokenizer, hence header).
  const uint64_t released_data = 7206168928ull - 11120992ull;
  EXPECT_LE(bytes, released_data);
  EXPECT_GE(bytes + 851 * 31, released_data);
  // The folded-weight list equals the released file's 401 names (order carries no meaning).
  auto released = LoadReleasedHadamard(TestDataPath("prism/ternary_bonsai_hadamard.json"));
  ASSERT_TRUE(released.ok());
  const auto& ours = (*model)->fold().folded_names;
  EXPECT_EQ(std::set<std::string>(ours.begin(), ours.end()),
            std::set<std::string>(released->weight_names.begin(), released->weight_names.end()));
  EXPECT_EQ(released->inverse_weight_names, std::vector<std::string>{"token_embd.weight"});
}

TEST(Mkmodel, SameArgumentsGiveIdenticalFiles) {
  TempDir dir;
  const std::vector<std::string> base = {WALSH_MKMODEL_BIN, "--preset", "tiny", "--seed", "5"};
  auto run = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("--out");
    argv.push_back(out);
    const auto r = RunProcess(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ReadFileOrDie(out);
  };
  const std::string a = run(dir.File("a.gguf"), {});
  const std::string b = run(dir.File("b.gguf"), {});
  const std::string c = run(dir.File("c.gguf"), {"--seed", "6"});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Mkmodel, BothFormatsEncodeTheSameNetwork) {
  auto pq = SyntheticModel::Create({.preset = "tiny", .format = TernaryFormat::kPq2_0});
  auto ptq = SyntheticModel::Create({.preset = "tiny", .format = TernaryFormat::kPtq1_0});
  ASSERT_TRUE(pq.ok() && ptq.ok());
  TempDir dir;
  ASSERT_TRUE((*pq)->WritePacked(dir.File("pq.gguf")).ok());
  ASSERT_TRUE((*ptq)->WritePacked(dir.File("ptq.gguf")).ok());
  auto a = LoadModelFile(dir.File("pq.gguf"));
  auto b = LoadModelFile(dir.File("ptq.gguf"));
  ASSERT_TRUE(a.ok() && b.ok());
  int ternary = 0;
  for (const GgufTensorInfo& ta : a->gguf->tensors()) {
    const GgufTensorInfo* tb = b->gguf->FindTensor(ta.name);
    ASSERT_NE(tb, nullptr);
    if (ta.type != kGgmlPq2_0) continue;
    ASSERT_EQ(tb->type, kGgmlPtq1_0);
    ++ternary;
    const int64_t n = static_cast<int64_t>(ta.n_elements);
    std::vector<float> da(n), db(n);
    DequantizeRowPq2_0Ref(reinterpret_cast<const block_pq2_0*>(ta.data), da.data(), n);
    DequantizeRowPtq1_0Ref(reinterpret_cast<const block_ptq1_0*>(tb->data), db.data(), n);
    ASSERT_EQ(da, db) << ta.name;
    // Most blocks mix -1, 0 and +1, like a trained model's.
    int mixed = 0;
    for (int64_t blk = 0; blk < n / 128; ++blk) {
      bool neg = false, zero = false, pos = false;
      for (int j = 0; j < 128; ++j) {
        const float v = da[blk * 128 + j];
        neg |= v < 0;
        zero |= v == 0;
        pos |= v > 0;
      }
      mixed += neg && zero && pos;
    }
    EXPECT_GT(mixed, n / 128 * 9 / 10) << ta.name;
  }
  EXPECT_EQ(ternary, 27);
}

// The dense file is the unfolded network: W_plain x == W_stored R(x) for every folded weight,
// and the dense embedding row is the inverse-rotated stored row.
TEST(Mkmodel, DenseOutIsTheUnfoldedNetwork) {
  auto model = SyntheticModel::Create({.preset = "tiny", .seed = 3});
  ASSERT_TRUE(model.ok());
  TempDir dir;
  ASSERT_TRUE((*model)->WritePacked(dir.File("m.gguf")).ok());
  ASSERT_TRUE((*model)->WriteDense(dir.File("d.gguf")).ok());
  auto packed = LoadModelFile(dir.File("m.gguf"));
  ASSERT_TRUE(packed.ok());
  auto dense = GgufFile::Open(dir.File("d.gguf"));
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ((*dense)->FindKey("prism.hadamard.version"), nullptr);
  EXPECT_TRUE(*(*dense)->GetBool("general.walsh.dense_reference"));
  const PrismContract& c = packed->contract;
  std::mt19937 gen(1);
  std::normal_distribution<float> dist;
  for (const std::string name :
       {"blk.0.ssm_out.weight", "blk.3.attn_output.weight", "blk.1.ffn_down.weight",
        "blk.2.attn_qkv.weight", "output.weight"}) {
    SCOPED_TRACE(name);
    const GgufTensorInfo* ts = packed->gguf->FindTensor(name);
    const GgufTensorInfo* td = (*dense)->FindTensor(name);
    ASSERT_TRUE(ts != nullptr && td != nullptr);
    ASSERT_EQ(td->type, kGgmlF32);
    const FoldedWeight* fw = c.FindFolded(name);
    ASSERT_NE(fw, nullptr);
    const int64_t n = fw->width;
    std::vector<float> x(n), px(n), rx(n), row(n);
    for (float& v : x) v = dist(gen);
    if (fw->gdn_permute) {
      GdnPermuteRef(x.data(), c.gdn.n_k, c.gdn.rep, c.gdn.hd, px.data());
    } else {
      px = x;
    }
    SignedFwhtForwardRef(px.data(), c.SignsFor(n), n, c.block_size, rx.data());
    const float* plain = reinterpret_cast<const float*>(td->data);
    for (uint64_t o = 0; o < ts->rows(); o += 7) {
      DequantizeRowPq2_0Ref(reinterpret_cast<const block_pq2_0*>(ts->data) + o * n / 128,
                            row.data(), n);
      double folded = 0, unfolded = 0, scale = 0;
      for (int64_t i = 0; i < n; ++i) {
        folded += double{row[i]} * rx[i];
        unfolded += double{plain[o * n + i]} * x[i];
        scale += std::fabs(double{row[i]} * rx[i]);
      }
      ASSERT_NEAR(folded, unfolded, 1e-5 * scale) << "row " << o;
    }
  }
  // Embedding: dense row e with T(s ⊙ e) equal to the stored row.
  const GgufTensorInfo* es = packed->gguf->FindTensor("token_embd.weight");
  const GgufTensorInfo* ed = (*dense)->FindTensor("token_embd.weight");
  const int64_t h = static_cast<int64_t>(es->ne[0]);
  std::vector<float> stored(h), again(h);
  for (uint64_t t = 0; t < es->rows(); t += 50) {
    DequantizeRowPq2_0Ref(reinterpret_cast<const block_pq2_0*>(es->data) + t * h / 128,
                          stored.data(), h);
    SignedFwhtForwardRef(reinterpret_cast<const float*>(ed->data) + t * h, c.SignsFor(h), h,
                         c.block_size, again.data());
    for (int64_t i = 0; i < h; ++i) ASSERT_NEAR(again[i], stored[i], 1e-5) << t << " " << i;
  }
}

TEST(Mkmodel, RefusesWhatItCannotMake) {
  EXPECT_FALSE(SyntheticModel::Create({.preset = "medium"}).ok());
  EXPECT_FALSE(SyntheticModel::Create({.preset = "tiny", .signs = SignSource::kReal}).ok());
  EXPECT_FALSE(SyntheticModel::Create({.preset = "tiny", .layers = 9}).ok());
  auto big = SyntheticModel::Create({.preset = "27b", .layers = 1});
  ASSERT_TRUE(big.ok());
  TempDir dir;
  EXPECT_FALSE((*big)->WriteDense(dir.File("d.gguf")).ok());
}

}  // namespace
}  // namespace walsh
