// Schedule invariance, the keystone of exact migration: a token's logits are bit-identical
// however its sequence was fed (whole, chunks of 1/7/64, decode steps), whatever shares the
// batch, with 1 or 2 threads, and on every kernel ISA. Plus the engine's error contract.
#include <cstring>
#include <map>
#include <random>

#include "gtest/gtest.h"
#include "tests/util/synthetic_engine.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_model.h"
#include "worker/engine/engine.h"

namespace walsh {
namespace {

// Feeds `ids` in chunks of `chunk` tokens; returns the logits at every position.
std::vector<float> FeedInChunks(SequenceRunner& e, const std::vector<int32_t>& ids, size_t chunk) {
  auto seq = e.AddSequence();
  EXPECT_TRUE(seq.ok());
  std::vector<float> all;
  for (size_t i = 0; i < ids.size(); i += chunk) {
    std::vector<int32_t> part(ids.begin() + i, ids.begin() + std::min(ids.size(), i + chunk));
    auto out = e.Forward({{*seq, part, /*all_logits=*/true}});
    EXPECT_TRUE(out.ok()) << out.status();
    all.insert(all.end(), out->logits.begin(), out->logits.end());
  }
  EXPECT_TRUE(e.RemoveSequence(*seq).ok());
  return all;
}

void ExpectBitIdentical(const std::vector<float>& a, const std::vector<float>& b,
                        const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
}

EngineOptions WithKv(KvCacheDtype dtype, EngineOptions o = {}) {
  o.kv_cache_dtype = dtype;
  return o;
}

void CheckScheduleInvariance(const std::string& preset, int prompt_len,
                             KvCacheDtype kv = KvCacheDtype::kFp16) {
  testing::SyntheticEngine f(preset);
  const std::vector<int32_t> ids = f.Tokens(prompt_len, 1);
  auto engine = f.Make(WithKv(kv));
  const std::vector<float> whole = FeedInChunks(*engine, ids, ids.size());
  ExpectBitIdentical(whole, FeedInChunks(*engine, ids, 1), "decode steps");
  ExpectBitIdentical(whole, FeedInChunks(*engine, ids, 7), "chunks of 7");
  ExpectBitIdentical(whole, FeedInChunks(*engine, ids, 64), "chunks of 64");
  auto two_threads = f.Make(WithKv(kv, {.threads = 2}));
  ExpectBitIdentical(whole, FeedInChunks(*two_threads, ids, 5), "2 threads");
  auto scalar = f.Make(WithKv(kv, {.threads = 2, .isa = CpuIsa::kScalar}));
  ExpectBitIdentical(whole, FeedInChunks(*scalar, ids, 13), "scalar kernels");

  // Mixed batches: 1-8 sequences at once, each advancing by a random chunk per step, prefill
  // and decode interleaved. Each sequence's logits must equal its solo run.
  std::mt19937 gen(9);
  for (int n_seqs : {1, 3, 8}) {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::vector<float>> solo;
    for (int s = 0; s < n_seqs; ++s) {
      prompts.push_back(f.Tokens(5 + gen() % prompt_len, 100 + s));
      solo.push_back(FeedInChunks(*engine, prompts.back(), prompts.back().size()));
    }
    auto batched = f.Make(WithKv(kv, {.threads = 2}));
    std::vector<SequenceId> ids_of(n_seqs);
    std::vector<size_t> fed(n_seqs, 0);
    std::vector<std::vector<float>> got(n_seqs);
    for (int s = 0; s < n_seqs; ++s) ids_of[s] = *batched->AddSequence();
    for (;;) {
      std::vector<SequenceInput> batch;
      std::vector<int> who;
      for (int s = 0; s < n_seqs; ++s) {
        if (fed[s] == prompts[s].size() || gen() % 4 == 0) continue;
        const size_t take = std::min<size_t>(prompts[s].size() - fed[s], 1 + gen() % 9);
        batch.push_back(
            {ids_of[s],
             std::vector<int32_t>(prompts[s].begin() + fed[s], prompts[s].begin() + fed[s] + take),
             true});
        who.push_back(s);
        fed[s] += take;
      }
      if (batch.empty()) {
        bool done = true;
        for (int s = 0; s < n_seqs; ++s) done &= fed[s] == prompts[s].size();
        if (done) break;
        continue;
      }
      auto out = batched->Forward(batch);
      ASSERT_TRUE(out.ok()) << out.status();
      size_t row = 0;
      for (size_t b = 0; b < batch.size(); ++b) {
        for (size_t k = 0; k < batch[b].tokens.size(); ++k, ++row) {
          got[who[b]].insert(got[who[b]].end(), out->RowLogits(row),
                             out->RowLogits(row) + f.vocab());
        }
      }
    }
    for (int s = 0; s < n_seqs; ++s) ExpectBitIdentical(solo[s], got[s], "mixed batch");
  }
}

TEST(ScheduleInvariance, Tiny) { CheckScheduleInvariance("tiny", 70); }
TEST(ScheduleInvariance, Small) { CheckScheduleInvariance("small", 24); }
TEST(ScheduleInvariance, Q8KvCache) { CheckScheduleInvariance("tiny", 70, KvCacheDtype::kQ8); }
TEST(ScheduleInvariance, Q4KvCache) { CheckScheduleInvariance("small", 24, KvCacheDtype::kQ4); }

// The quantized pages are really what attention reads: their logits differ from fp16's, by
// little (q8 less than q4), and the pages take the bytes the dtype says.
TEST(QuantizedKvCache, ChangesTheLogitsByLittleAndTakesItsBytes) {
  testing::SyntheticEngine f("small");
  const std::vector<int32_t> ids = f.Tokens(40, 2);
  auto fp16 = f.Make();
  const std::vector<float> base = FeedInChunks(*fp16, ids, ids.size());
  double previous = 0;
  for (KvCacheDtype kv : {KvCacheDtype::kQ8, KvCacheDtype::kQ4}) {
    auto engine = f.Make(WithKv(kv));
    const std::vector<float> got = FeedInChunks(*engine, ids, ids.size());
    ASSERT_EQ(got.size(), base.size());
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i]) - base[i]));
      max_abs = std::max(max_abs, std::abs(static_cast<double>(base[i])));
    }
    EXPECT_GT(max_diff, 0) << KvCacheDtypeName(kv);
    EXPECT_LT(max_diff, 0.1 * max_abs) << KvCacheDtypeName(kv);
    EXPECT_GT(max_diff, previous) << KvCacheDtypeName(kv);
    previous = max_diff;
    EXPECT_EQ(engine->engine().kv_cache_dtype(), kv);
    EXPECT_EQ(engine->kv_bytes_per_token(),
              fp16->kv_bytes_per_token() * (kv == KvCacheDtype::kQ8 ? 34 : 18) / 64);
  }
}

TEST(QuantizedKvCache, BytesAndNames) {
  EXPECT_EQ(KvBytes(KvCacheDtype::kQ8, 256), 8 * 34);
  EXPECT_EQ(KvBytes(KvCacheDtype::kQ4, 256), 8 * 18);
  EXPECT_EQ(KvBytes(KvCacheDtype::kFp16, 256), 512);
  KvCacheDtype parsed;
  EXPECT_FALSE(ParseKvCacheDtype("fp8", &parsed));
  EXPECT_TRUE(ParseKvCacheDtype("q4", &parsed));
  EXPECT_EQ(parsed, KvCacheDtype::kQ4);
}

// What the scheduler plans preemption by: the pages a step takes, asked before it runs.
TEST(EnginePages, PagesToGrowIsWhatTheStepTakes) {
  testing::SyntheticEngine f("tiny");
  auto e = f.Make({}, {.prefix_caching = false});
  auto a = e->AddSequence();
  auto b = e->AddSequence();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(e->Forward({{*a, f.Tokens(10, 1), false}}).ok());            // one page
  const std::vector<SequenceInput> step = {{*a, f.Tokens(23, 2), false},   // 33: 3 pages, +2
                                           {*b, f.Tokens(16, 3), false}};  // 16: 1 page, +1
  EXPECT_EQ(e->kv().PagesToGrow(step), 3);
  const int64_t before = e->Stats().kv_pages_used;
  ASSERT_TRUE(e->Forward(step).ok());
  EXPECT_EQ(e->Stats().kv_pages_used - before, 3);
  EXPECT_EQ(e->kv().PagesToGrow({{*a, {1}, false}}), 0);  // 34 tokens still fit 3 pages
}

TEST(EngineErrors, RefusesBadBatchesWithoutChangingState) {
  testing::SyntheticEngine f("tiny");
  // Room for 4 pages of 16 positions.
  const int64_t page_bytes = KvPagePool::PageBytes(16, 1, 2 * 64 * 2);  // fp16 K and V
  auto e = f.Make({}, {.kv_cache_bytes = 4 * page_bytes, .state_bytes = 2 * 1024 * 1024});
  auto a = e->AddSequence();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(e->Forward({{*a, {1, 2, 3}}}).status().code(), absl::StatusCode::kOk);
  EXPECT_EQ(e->Forward({{*a, {static_cast<int32_t>(f.vocab())}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->Forward({{*a, {}}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->Forward({{*a, {1}}, {*a, {2}}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->Forward({{12345, {1}}}).status().code(), absl::StatusCode::kNotFound);
  // 3 + 62 positions need 5 pages: refused, and the sequence is untouched.
  auto big = e->Forward({{*a, f.Tokens(62, 3)}});
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*e->SequenceLength(*a), 3);
  EXPECT_EQ(e->Stats().kv_pages_used, 1);
  // State slots run out too, as an error.
  std::vector<SequenceId> more;
  for (;;) {
    auto s = e->AddSequence();
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
      break;
    }
    more.push_back(*s);
    ASSERT_LT(more.size(), 10000u);
  }
  for (SequenceId s : more) ASSERT_TRUE(e->RemoveSequence(s).ok());
  ASSERT_TRUE(e->RemoveSequence(*a).ok());
  EXPECT_EQ(e->Stats().kv_pages_used, 0);
  EXPECT_EQ(e->Stats().state_slots_used, 0);

  auto limited = f.Make({.max_context = 8});
  auto s = limited->AddSequence();
  EXPECT_EQ(limited->Forward({{*s, f.Tokens(9, 1)}}).status().code(),
            absl::StatusCode::kOutOfRange);
}

// The engine runs on the memory it is handed, and only on memory its allocation holds: a page
// table short of the step, a page or slot it never allocated, or planes that do not match a
// speculative step are refused by name before anything runs; an engine whose caches were never
// allocated runs nothing, and allocates once.
TEST(EngineErrors, RefusesMemoryThatDoesNotHoldTheStep) {
  testing::SyntheticEngine f("tiny");
  auto bare = Engine::Create(f.Load(), {});
  ASSERT_TRUE(bare.ok()) << bare.status();
  Engine& e = **bare;
  const std::vector<int32_t> pages = {0, 1}, outside = {0, 9}, planes = {2};
  const std::vector<SequenceInput> step = {{.id = 1, .tokens = f.Tokens(20, 1)}};
  const SequenceCache held{.length = 0, .slot = 0, .pages = pages};
  EXPECT_EQ(e.Forward(step, {held}).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(e.AllocateCaches({.pages = 8, .slots = 2, .snapshot_slots = 1}, 16).ok());
  EXPECT_EQ(e.AllocateCaches({.pages = 8, .slots = 2}, 16).code(),
            absl::StatusCode::kFailedPrecondition);

  const auto refused = [&](const std::vector<SequenceInput>& batch, const SequenceCache& m) {
    const absl::Status s = e.Forward(batch, {m}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("sequence 1's memory does not hold its step"), std::string::npos)
        << s;
  };
  refused(step, {.length = 0, .slot = 0, .pages = absl::MakeConstSpan(pages).first(1)});
  refused(step, {.length = 0, .slot = 0, .pages = outside});
  refused(step, {.length = 0, .slot = 3, .pages = pages});
  refused(step, {.length = 0, .slot = -1, .pages = pages});
  refused(step, {.length = 0, .slot = 0, .pages = pages, .planes = planes});
  const std::vector<SequenceInput> speculative = {
      {.id = 1, .tokens = f.Tokens(3, 2), .keep_states = true}};
  refused(speculative, {.length = 0, .slot = 0, .pages = pages, .planes = planes});
  EXPECT_EQ(e.Forward(step, {}).status().code(), absl::StatusCode::kInvalidArgument);

  // The same step on memory that holds it runs, and gives what a solo runner's sequence gets.
  auto ran = e.Forward(step, {held});
  ASSERT_TRUE(ran.ok()) << ran.status();
  auto solo = f.Make();
  auto seq = solo->AddSequence();
  auto want = solo->Forward({{*seq, step[0].tokens}});
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(0, std::memcmp(ran->logits.data(), want->logits.data(), want->logits.size() * 4));
}

TEST(EngineErrors, GraphCheckRefusesAFoldedWeightWithoutItsTransform) {
  testing::SyntheticEngine f("tiny");
  auto e = f.Make();
  using Tag = Engine::InputTag;
  const LayerWeights& L = e->model().layers()[0];
  const Projection& up = L.ffn_up;
  ASSERT_TRUE(up.folded);
  EXPECT_TRUE(
      e->engine().CheckInput(up, Tag{Engine::Transform::kRotated, up.signs}, up.signs).ok());
  const absl::Status plain = e->engine().CheckInput(up, Tag{}, up.signs);
  EXPECT_EQ(plain.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(plain.message(),
            "graph check: 'blk.0.ffn_up.weight' needs its input rotated, got it plain");
  // Rotated, but with the signs of other columns: as wrong as not rotated.
  if (up.signs != nullptr) {
    const absl::Status other_signs =
        e->engine().CheckInput(up, Tag{Engine::Transform::kRotated, up.signs + 1}, up.signs);
    EXPECT_EQ(other_signs.code(), absl::StatusCode::kInternal);
    EXPECT_NE(other_signs.message().find("another sign vector"), std::string::npos);
  }
  // ssm_out of a grouped-order contract needs its input permuted, then rotated.
  const Projection& out = L.gdn.out;
  EXPECT_EQ(Engine::RequiredTransform(out), Engine::Transform::kPermutedRotated);
  EXPECT_TRUE(e->engine()
                  .CheckInput(out, Tag{Engine::Transform::kPermutedRotated, out.signs}, out.signs)
                  .ok());
  EXPECT_FALSE(
      e->engine().CheckInput(out, Tag{Engine::Transform::kRotated, out.signs}, out.signs).ok());
}

}  // namespace
}  // namespace walsh
