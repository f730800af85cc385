// Image inputs through the engine (docs/vision.md §4): M-RoPE positions, and image rows in place
// of the pad tokens' embeddings. The positions are worked by hand; the rotation is checked pair by
// pair; the engine is schedule-invariant and tensor-parallel bit-identical with images as without,
// and a text sequence sent down the image path is the text path bit for bit. (The float64
// reference with images is FoldIdentity.ImageInputs, engine_reference_test.cc.)
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/token_ops.h"
#include "tests/util/synthetic_engine.h"
#include "worker/engine/engine.h"
#include "worker/engine/image_prompt.h"
#include "worker/engine/mrope_positions.h"
#include "worker/engine/rope_table.h"

namespace walsh {
namespace {

std::vector<int32_t> Triples(std::initializer_list<std::array<int32_t, 3>> rows) {
  std::vector<int32_t> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

TEST(MropePositions, AnImageSpreadsOverItsGridAndTheTextAfterItTrails) {
  // Two text tokens, a 2×3 image, two text tokens.
  const std::vector<ImageSpan> images = {{.first = 2, .grid_h = 2, .grid_w = 3}};
  EXPECT_EQ(MropePositions(images, 0, 10), Triples({{0, 0, 0},
                                                    {1, 1, 1},
                                                    {2, 2, 2},
                                                    {2, 2, 3},
                                                    {2, 2, 4},
                                                    {2, 3, 2},
                                                    {2, 3, 3},
                                                    {2, 3, 4},
                                                    {5, 5, 5},
                                                    {6, 6, 6}}));
}

TEST(MropePositions, TwoImagesBackToBackAndAnyWindowOfThem) {
  // A 1×4 image at 1 (next text at 1 + 4 = 5 - 0), then a 3×2 image right after it at token 5,
  // which starts at p0 = 5, and text after it at 5 + 3 = 8 (token 11).
  const std::vector<ImageSpan> images = {{.first = 1, .grid_h = 1, .grid_w = 4},
                                         {.first = 5, .grid_h = 3, .grid_w = 2}};
  const std::vector<int32_t> all = MropePositions(images, 0, 13);
  EXPECT_EQ(all, Triples({{0, 0, 0},
                          {1, 1, 1},
                          {1, 1, 2},
                          {1, 1, 3},
                          {1, 1, 4},
                          {5, 5, 5},
                          {5, 5, 6},
                          {5, 6, 5},
                          {5, 6, 6},
                          {5, 7, 5},
                          {5, 7, 6},
                          {8, 8, 8},
                          {9, 9, 9}}));
  for (int64_t b = 0; b <= 13; ++b) {
    for (int64_t e = b; e <= 13; ++e) {
      EXPECT_EQ(MropePositions(images, b, e),
                std::vector<int32_t>(all.begin() + 3 * b, all.begin() + 3 * e))
          << b << ".." << e;
    }
  }
}

TEST(RopeStreams, InterleavedSectionsAsTheFileSaysThem) {
  const std::vector<uint8_t> released = RopeStreamOfPair(64, {11, 11, 10, 0});
  for (int i = 0; i < 32; ++i) EXPECT_EQ(released[i], i % 3) << "pair " << i;
  const std::vector<uint8_t> tiny = RopeStreamOfPair(32, {6, 5, 5, 0});
  for (int i = 0; i < 16; ++i) EXPECT_EQ(tiny[i], i % 3) << "pair " << i;
  // Sections that do not cover every pair leave the rest to the fourth stream: [16, 16, 0, 0]
  // gives w's turns (i % 3 == 2) to it.
  const std::vector<uint8_t> two = RopeStreamOfPair(64, {16, 16, 0, 0});
  for (int i = 0; i < 32; ++i) EXPECT_EQ(two[i], i % 3 == 2 ? 3 : i % 3) << "pair " << i;
}

TEST(RopeStreams, OnePositionEverywhereIsNeoxBitForBit) {
  const std::vector<double> inv = RopeInverseFrequencies(64, 1e7f);
  const std::vector<uint8_t> streams = RopeStreamOfPair(64, {11, 11, 10, 0});
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  for (int32_t pos : {0, 1, 17, 4095, 262143}) {
    std::vector<float> a(128), b;
    for (float& x : a) x = normal(gen);
    b = a;
    RopeNeoxInPlace(a.data(), 64, pos, inv.data());
    const int32_t four[4] = {pos, pos, pos, 0};
    RopeStreamsInPlace(b.data(), 64, four, streams.data(), inv.data());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << pos;
  }
}

TEST(RopeStreams, EachPairTurnsByItsOwnStream) {
  const std::vector<double> inv = RopeInverseFrequencies(64, 1e7f);
  const std::vector<uint8_t> streams = RopeStreamOfPair(64, {11, 11, 10, 0});
  std::vector<float> head(128);
  for (int i = 0; i < 128; ++i) head[i] = 0.01f * static_cast<float>(i + 1);
  for (int stream = 0; stream < 3; ++stream) {
    std::vector<float> x = head;
    int32_t pos[4] = {0, 0, 0, 0};
    pos[stream] = 9;
    RopeStreamsInPlace(x.data(), 64, pos, streams.data(), inv.data());
    for (int i = 0; i < 32; ++i) {
      if (i % 3 != stream) {
        EXPECT_EQ(x[i], head[i]) << "pair " << i << " moved with stream " << stream;
        EXPECT_EQ(x[i + 32], head[i + 32]);
        continue;
      }
      const double th = 9.0 * inv[i];
      EXPECT_NEAR(x[i], head[i] * std::cos(th) - head[i + 32] * std::sin(th), 1e-6) << i;
      EXPECT_NEAR(x[i + 32], head[i] * std::sin(th) + head[i + 32] * std::cos(th), 1e-6) << i;
    }
    for (int i = 64; i < 128; ++i) EXPECT_EQ(x[i], head[i]);  // past n_rot: untouched
  }
}

// A prompt with images: its tokens (each image's keyed, as the scheduler feeds them) and images.
struct ImagePrompt {
  std::vector<int32_t> tokens;
  PromptImages images;

  // The input that appends tokens [begin, end).
  SequenceInput Input(SequenceId id, int64_t begin, int64_t end) const {
    SequenceInput in{id, std::vector<int32_t>(tokens.begin() + begin, tokens.begin() + end),
                     /*all_logits=*/true};
    AttachImageInputs(images, begin, in);
    return in;
  }
};

const std::vector<ImageSpan> kTwoImages = {{.first = 4, .grid_h = 3, .grid_w = 4},
                                           {.first = 18, .grid_h = 2, .grid_w = 1}};

// Random text around `spans`, whose rows are random too (digests: the seed's).
ImagePrompt MakeImagePrompt(const testing::SyntheticEngine& f, uint32_t seed, int length = 24,
                            const std::vector<ImageSpan>& spans = kTwoImages) {
  ImagePrompt p;
  p.images.width = f.config().embedding_length;
  p.images.spans = spans;
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (const ImageSpan& image : spans) {
    p.images.digests.push_back(seed * 1000003ULL + p.images.digests.size());
    for (int64_t i = 0; i < image.tokens() * p.images.width; ++i) {
      p.images.rows.push_back(normal(gen));
    }
  }
  p.tokens = KeyImageTokens(f.Tokens(length, seed), p.images);
  return p;
}

// Feeds the prompt in chunks of `chunk`; the logits at every position.
std::vector<float> Feed(SequenceRunner& e, const ImagePrompt& p, int64_t chunk) {
  auto seq = e.AddSequence();
  EXPECT_TRUE(seq.ok());
  std::vector<float> all;
  const int64_t n = static_cast<int64_t>(p.tokens.size());
  for (int64_t i = 0; i < n; i += chunk) {
    auto out = e.Forward({p.Input(*seq, i, std::min(n, i + chunk))});
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) break;
    all.insert(all.end(), out->logits.begin(), out->logits.end());
  }
  EXPECT_TRUE(e.RemoveSequence(*seq).ok());
  return all;
}

void ExpectBitIdentical(const std::vector<float>& a, const std::vector<float>& b,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
}

int64_t Width(const testing::SyntheticEngine& f) { return f.config().embedding_length; }

TEST(ImageInputs, TextDownTheImagePathIsTheTextPathBitForBit) {
  testing::SyntheticEngine f("tiny");
  auto engine = f.Make();
  const std::vector<int32_t> ids = f.Tokens(20, 5);
  auto plain_seq = engine->AddSequence();
  auto plain = engine->Forward({{*plain_seq, ids, true}});
  ASSERT_TRUE(plain.ok());
  // The same tokens with their positions spelled out and no row replaced, batched beside a
  // sequence that does carry an image row (so the step runs the image path for both).
  auto seq = engine->AddSequence();
  auto other = engine->AddSequence();
  SequenceInput text{*seq, ids, true};
  text.rope_positions = MropePositions({}, 0, 20);
  SequenceInput image{*other, {7, 8}, true};
  image.embedding_of_token = {0, -1};
  image.embeddings.assign(Width(f), 0.25f);
  auto both = engine->Forward({image, text});
  ASSERT_TRUE(both.ok()) << both.status();
  const std::vector<float> text_rows(both->logits.begin() + 2 * both->vocab, both->logits.end());
  ExpectBitIdentical(plain->logits, text_rows, "explicit positions");
}

void CheckScheduleInvariance(const char* preset) {
  testing::SyntheticEngine f(preset);
  const ImagePrompt p = MakeImagePrompt(f, 11);
  auto engine = f.Make();
  const std::vector<float> whole = Feed(*engine, p, 1000);
  ExpectBitIdentical(whole, Feed(*engine, p, 1), "one token at a time");
  ExpectBitIdentical(whole, Feed(*engine, p, 5), "chunks of 5 (splitting the first image)");
  auto two_threads = f.Make({.threads = 2});
  ExpectBitIdentical(whole, Feed(*two_threads, p, 7), "2 threads");
  auto scalar = f.Make({.threads = 2, .isa = CpuIsa::kScalar});
  ExpectBitIdentical(whole, Feed(*scalar, p, 3), "scalar kernels");

  // Beside a text sequence and another image prompt, each advancing by its own chunks.
  const ImagePrompt q = MakeImagePrompt(f, 12);
  const std::vector<float> q_solo = Feed(*engine, q, 1000);
  const std::vector<int32_t> text = f.Tokens(30, 13);
  auto text_seq = engine->AddSequence();
  const std::vector<float> text_solo = engine->Forward({{*text_seq, text, true}})->logits;
  ASSERT_TRUE(engine->RemoveSequence(*text_seq).ok());
  auto batched = f.Make({.threads = 2});
  const SequenceId a = *batched->AddSequence(), b = *batched->AddSequence(),
                   t = *batched->AddSequence();
  std::vector<float> got_a, got_b, got_t;
  int64_t fed_a = 0, fed_b = 0, fed_t = 0;
  while (fed_a < 24 || fed_b < 24 || fed_t < 30) {
    std::vector<SequenceInput> batch;
    const int64_t to_a = std::min<int64_t>(24, fed_a + 6), to_b = std::min<int64_t>(24, fed_b + 4),
                  to_t = std::min<int64_t>(30, fed_t + 5);
    if (fed_a < 24) batch.push_back(p.Input(a, fed_a, to_a));
    if (fed_t < 30) {
      batch.push_back({t, std::vector<int32_t>(text.begin() + fed_t, text.begin() + to_t), true});
    }
    if (fed_b < 24) batch.push_back(q.Input(b, fed_b, to_b));
    fed_a = to_a, fed_b = to_b, fed_t = to_t;
    auto out = batched->Forward(batch);
    ASSERT_TRUE(out.ok()) << out.status();
    const int64_t v = out->vocab;
    size_t row = 0;
    for (const SequenceInput& in : batch) {
      std::vector<float>& dst = in.id == a ? got_a : in.id == b ? got_b : got_t;
      dst.insert(dst.end(), out->logits.begin() + row * v,
                 out->logits.begin() + (row + in.tokens.size()) * v);
      row += in.tokens.size();
    }
  }
  ExpectBitIdentical(whole, got_a, "image prompt in a mixed batch");
  ExpectBitIdentical(q_solo, got_b, "second image prompt in a mixed batch");
  ExpectBitIdentical(text_solo, got_t, "text beside image prompts");
}

// The small preset: the released model's rotary sections and block size.
TEST(ImageInputs, AreScheduleInvariant) { CheckScheduleInvariance("tiny"); }
TEST(ImageInputs, AreScheduleInvariantOnTheSmallShapes) { CheckScheduleInvariance("small"); }

TEST(ImageInputs, RowsAndPositionsBothReachTheLogits) {
  testing::SyntheticEngine f("tiny");
  const ImagePrompt p = MakeImagePrompt(f, 21);
  auto engine = f.Make();
  const std::vector<float> base = Feed(*engine, p, 1000);
  const int64_t v = f.vocab();
  const auto last = [&](const std::vector<float>& l) {
    return std::vector<float>(l.end() - v, l.end());
  };
  ImagePrompt other_rows = p;
  other_rows.images.rows[5 * Width(f)] += 1.0f;  // one value of one row of the first image
  EXPECT_NE(last(base), last(Feed(*engine, other_rows, 1000)));
  // The logits before the first image are untouched by it (causal order).
  const std::vector<float> changed = Feed(*engine, other_rows, 1000);
  ExpectBitIdentical(std::vector<float>(base.begin(), base.begin() + 4 * v),
                     std::vector<float>(changed.begin(), changed.begin() + 4 * v), "before");
  ImagePrompt flat = p;
  for (ImageSpan& image : flat.images.spans) image.grid_w = image.tokens(), image.grid_h = 1;
  EXPECT_NE(last(base), last(Feed(*engine, flat, 1000)))
      << "the 3×4 grid and a 1×12 strip must rotate differently";
}

TEST(ImageInputs, TensorParallelRanksAgreeBitForBit) {
  testing::SyntheticEngine f("tiny");
  const ImagePrompt p = MakeImagePrompt(f, 31);
  auto one = f.Make();
  const std::vector<float> expected = Feed(*one, p, 5);
  for (int tp : {2, 4}) {
    auto engine = f.Make({.tp = tp});
    ExpectBitIdentical(expected, Feed(*engine, p, 5), "tp=" + std::to_string(tp));
  }
}

TEST(ImageTokenKeys, AreNegativeAndDifferByImageAndPlace) {
  std::set<int32_t> seen;
  for (uint64_t digest : {1ULL, 2ULL, 0xffffffffffffffffULL}) {
    for (int64_t i = 0; i < 1000; ++i) {
      const int32_t key = ImageTokenKey(digest, i);
      EXPECT_LT(key, 0);
      seen.insert(key);
    }
  }
  EXPECT_GT(seen.size(), 2990u);  // 3000 draws from 2^31: a repeat or two at most
}

TEST(ImageInputs, ThePrefixCacheSharesAnImageOnlyWithTheSameImage) {
  testing::SyntheticEngine f("tiny");
  const std::vector<ImageSpan> one = {{.first = 6, .grid_h = 3, .grid_w = 4}};  // tokens 6..17
  const ImagePrompt p = MakeImagePrompt(f, 61, 50, one);
  auto cold = f.Make({}, {.prefix_caching = false});
  auto warm = f.Make({}, {.prefix_caching = true});
  const std::vector<float> expected = Feed(*cold, p, 1000);
  {  // 40 tokens fed and snapshotted: two full pages of 16 and the state at 40
    const SequenceId seq = *warm->AddSequence();
    ASSERT_TRUE(warm->Forward({p.Input(seq, 0, 40)}).ok());
    ASSERT_TRUE(warm->Snapshot(seq).ok());
    ASSERT_TRUE(warm->RemoveSequence(seq).ok());
  }
  PrefixLookup lookup;
  auto seq = warm->AddSequence(p.tokens, &lookup);
  ASSERT_TRUE(seq.ok());
  ASSERT_EQ(lookup.hit_tokens, 40);
  auto rest = warm->Forward({p.Input(*seq, 40, 50)});
  ASSERT_TRUE(rest.ok()) << rest.status();
  const int64_t v = f.vocab();
  ExpectBitIdentical(std::vector<float>(expected.begin() + 40 * v, expected.end()), rest->logits,
                     "warm after the image vs cold");
  ASSERT_TRUE(warm->RemoveSequence(*seq).ok());

  // The same text and layout with another image (and the same rows under another digest): the
  // first page holds image tokens, so nothing is shared.
  for (bool same_rows : {false, true}) {
    ImagePrompt other = MakeImagePrompt(f, 62, 50, one);
    std::vector<int32_t> text = f.Tokens(50, 61);
    if (same_rows) other.images.rows = p.images.rows;
    other.tokens = KeyImageTokens(text, other.images);
    PrefixLookup miss;
    auto s2 = warm->AddSequence(other.tokens, &miss);
    ASSERT_TRUE(s2.ok());
    EXPECT_EQ(miss.hit_tokens, 0) << (same_rows ? "same rows, another digest" : "another image");
    ASSERT_TRUE(warm->RemoveSequence(*s2).ok());
  }
}

TEST(ImageInputs, MalformedInputsAreRefusedByNameAndChangeNothing) {
  testing::SyntheticEngine f("tiny");
  auto engine = f.Make();
  const int64_t width = Width(f);
  const SequenceId id = *engine->AddSequence();
  const auto refusal = [&](SequenceInput in) {
    in.id = id;
    auto out = engine->Forward({in});
    if (out.ok()) return std::string("accepted");
    EXPECT_EQ(*engine->SequenceLength(id), 0) << "a refused step changed the sequence";
    return std::string(out.status().message());
  };
  SequenceInput in{id, {1, 2}, false};
  in.rope_positions = {0, 0, 0};
  EXPECT_EQ(refusal(in), "sequence " + std::to_string(id) +
                             " brings 3 rope positions for 2 tokens; it needs 3 per token or none");
  in.rope_positions = {0, 0, 0, 1, -1, 1};
  EXPECT_NE(refusal(in).find("negative rope position -1"), std::string::npos);
  in.rope_positions.clear();
  in.embedding_of_token = {0};
  EXPECT_NE(refusal(in).find("1 embedding indices for 2 tokens"), std::string::npos);
  in.embedding_of_token = {0, 1};
  in.embeddings.assign(width, 0.0f);
  EXPECT_NE(refusal(in).find("names embedding row 1 of 1"), std::string::npos);
  in.embeddings.assign(width + 1, 0.0f);
  EXPECT_NE(refusal(in).find("embedding floats, not rows of " + std::to_string(width)),
            std::string::npos);
  in.embeddings.assign(width, 0.0f);
  in.embedding_of_token = {0, -1};
  in.tokens = {1, -5};  // a key only where a row replaces the embedding
  EXPECT_EQ(refusal(in), "token id -5 is outside [0, " + std::to_string(f.vocab()) + ")");
  in.tokens = {-5, 2};
  EXPECT_EQ(refusal(in), "accepted");
}

}  // namespace
}  // namespace walsh
