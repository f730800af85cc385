// The CUDA backend against the CPU backend, through the engine: the same logits bit for bit
// (the shared numerics make this the contract, not a tolerance), greedy continuations
// identical and the pooled mean KL within 1e-5 even if bits ever differ, schedule invariance on
// the GPU, image inputs (rows and M-RoPE positions), and the peer fixtures' greedy tokens. Skips
// where no CUDA device answers.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"
#include "nlohmann/json.hpp"
#include "tests/util/cuda_device.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_model.h"
#include "worker/engine/image_prompt.h"
#include "worker/engine/solo_runner.h"
#include "worker/parallel/nccl_api.h"

namespace walsh {
namespace {

using testing::ReadFileOrDie;
using testing::TestDataPath;

double MeanKl(const std::vector<float>& p, const std::vector<float>& q, int64_t vocab) {
  double total = 0;
  const int64_t rows = static_cast<int64_t>(p.size()) / vocab;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = p.data() + r * vocab;
    const float* b = q.data() + r * vocab;
    double ma = a[0], mb = b[0];
    for (int64_t i = 1; i < vocab; ++i)
      ma = std::max(ma, double{a[i]}), mb = std::max(mb, double{b[i]});
    double sa = 0, sb = 0;
    for (int64_t i = 0; i < vocab; ++i) sa += std::exp(a[i] - ma), sb += std::exp(b[i] - mb);
    for (int64_t i = 0; i < vocab; ++i) {
      const double la = a[i] - ma - std::log(sa), lb = b[i] - mb - std::log(sb);
      total += std::exp(la) * (la - lb);
    }
  }
  return total / rows;
}

std::unique_ptr<SoloRunner> MakeEngine(const std::string& path, Device device,
                                       KvCacheDtype kv = KvCacheDtype::kFp16,
                                       OpProfile* profile = nullptr, int tp = 1) {
  auto file = LoadModelFile(path);
  EXPECT_TRUE(file.ok()) << file.status();
  auto bound = Model::Bind(std::move(*file));
  EXPECT_TRUE(bound.ok()) << bound.status();
  EngineOptions opts;
  opts.device = device;
  opts.kv_cache_dtype = kv;
  opts.profile = profile;
  opts.tp = tp;
  const CacheOptions caches{.kv_cache_bytes = int64_t{64} << 20, .state_bytes = int64_t{64} << 20};
  // CUDA ranks before a device has proven them: this check's engines only (CheckDeviceTp).
  auto engine = SoloRunner::Create(std::move(*bound), opts, caches, {.unproven_cuda_tp = tp > 1});
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

// Logits at every position of `ids`, fed in chunks of `chunk`, then `greedy` decode steps.
struct FedRun {
  std::vector<float> logits;
  std::vector<int32_t> greedy;
};
FedRun Feed(SequenceRunner& e, const std::vector<int32_t>& ids, size_t chunk, int greedy) {
  FedRun run;
  auto seq = e.AddSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  const int64_t vocab = e.model().config().vocab_size;
  for (size_t i = 0; i < ids.size(); i += chunk) {
    std::vector<int32_t> part(ids.begin() + i, ids.begin() + std::min(ids.size(), i + chunk));
    auto out = e.Forward({{*seq, part, /*all_logits=*/true}});
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return run;
    run.logits.insert(run.logits.end(), out->logits.begin(), out->logits.end());
  }
  int32_t next = static_cast<int32_t>(Argmax(run.logits.data() + (ids.size() - 1) * vocab, vocab));
  for (int k = 0; k < greedy; ++k) {
    run.greedy.push_back(next);
    auto out = e.Forward({{*seq, {next}}});
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return run;
    next = static_cast<int32_t>(Argmax(out->RowLogits(0), vocab));
  }
  EXPECT_TRUE(e.RemoveSequence(*seq).ok());
  return run;
}

class CudaEngine : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_CUDA();
    const std::string& name = GetParam();
    kv_ = name.ends_with("_q8kv")   ? KvCacheDtype::kQ8
          : name.ends_with("_q4kv") ? KvCacheDtype::kQ4
                                    : KvCacheDtype::kFp16;
    if (name == "peer") {
      path_ = TestDataPath("peer/model.gguf");
      return;
    }
    auto m = SyntheticModel::Create(
        {.preset = name.substr(0, name.find('_')),
         .format = name.ends_with("ptq1_0") ? TernaryFormat::kPtq1_0 : TernaryFormat::kPq2_0,
         .seed = 5});
    ASSERT_TRUE(m.ok()) << m.status();
    path_ = dir_.File("m.gguf");
    ASSERT_TRUE((*m)->WritePacked(path_).ok());
  }

  testing::TempDir dir_;
  std::string path_;
  KvCacheDtype kv_ = KvCacheDtype::kFp16;  // "_q8kv" / "_q4kv" names: quantized KV pages
};

TEST_P(CudaEngine, MatchesTheCpuBitForBit) {
  auto cpu = MakeEngine(path_, Device::kCpu, kv_);
  auto gpu = MakeEngine(path_, Device::kCuda, kv_);
  ASSERT_TRUE(cpu && gpu);
  const int64_t vocab = cpu->model().config().vocab_size;
  std::mt19937 gen(11);
  std::vector<int32_t> ids(40);
  for (int32_t& id : ids) id = static_cast<int32_t>(gen() % vocab);
  const FedRun a = Feed(*cpu, ids, ids.size(), 16);
  const FedRun b = Feed(*gpu, ids, ids.size(), 16);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  int64_t differ = 0;
  float worst = 0;
  for (size_t i = 0; i < a.logits.size(); ++i) {
    differ += std::memcmp(&a.logits[i], &b.logits[i], 4) != 0;
    worst = std::max(worst, std::fabs(a.logits[i] - b.logits[i]));
  }
  const double kl = MeanKl(a.logits, b.logits, vocab);
  std::printf("cuda vs cpu (%s): %lld of %zu logits differ, max |diff| %.3g, mean KL %.3g\n",
              GetParam().c_str(), static_cast<long long>(differ), a.logits.size(), worst, kl);
  EXPECT_EQ(a.greedy, b.greedy);
  EXPECT_LE(kl, 1e-5);
  EXPECT_EQ(differ, 0);
}

TEST_P(CudaEngine, IsScheduleInvariant) {
  auto gpu = MakeEngine(path_, Device::kCuda, kv_);
  ASSERT_TRUE(gpu);
  const int64_t vocab = gpu->model().config().vocab_size;
  std::mt19937 gen(12);
  std::vector<int32_t> ids(37);
  for (int32_t& id : ids) id = static_cast<int32_t>(gen() % vocab);
  const FedRun whole = Feed(*gpu, ids, ids.size(), 0);
  for (size_t chunk : {size_t{1}, size_t{7}}) {
    const FedRun part = Feed(*gpu, ids, chunk, 0);
    ASSERT_EQ(whole.logits.size(), part.logits.size());
    EXPECT_EQ(0, std::memcmp(whole.logits.data(), part.logits.data(), whole.logits.size() * 4))
        << "chunks of " << chunk;
  }
  // Three sequences stepping together, each in its own chunking, equal their solo runs.
  std::vector<SequenceId> seqs;
  for (int s = 0; s < 3; ++s) seqs.push_back(*gpu->AddSequence());
  std::vector<std::vector<float>> got(3);
  std::vector<size_t> fed(3, 0);
  for (bool more = true; more;) {
    more = false;
    std::vector<SequenceInput> batch;
    std::vector<int> who;
    for (int s = 0; s < 3; ++s) {
      if (fed[s] == ids.size()) continue;
      const size_t n = std::min(ids.size() - fed[s], size_t{1} + (gen() % 9));
      batch.push_back({seqs[s], {ids.begin() + fed[s], ids.begin() + fed[s] + n}, true});
      who.push_back(s);
      fed[s] += n;
      more = true;
    }
    if (!more) break;
    auto out = gpu->Forward(batch);
    ASSERT_TRUE(out.ok()) << out.status();
    size_t row = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      for (size_t k = 0; k < batch[i].tokens.size(); ++k, ++row) {
        got[who[i]].insert(got[who[i]].end(), out->RowLogits(row), out->RowLogits(row) + vocab);
      }
    }
  }
  for (int s = 0; s < 3; ++s) {
    ASSERT_EQ(got[s].size(), whole.logits.size());
    EXPECT_EQ(0, std::memcmp(got[s].data(), whole.logits.data(), got[s].size() * 4)) << s;
  }
}

// The prefix cache's device copies (CopyStateSlot, CopyKvPage): a sequence restored from a
// snapshot off a page boundary continues with the logits of a cold run.
TEST_P(CudaEngine, PrefixCacheHitEqualsColdRun) {
  auto gpu = MakeEngine(path_, Device::kCuda, kv_);
  ASSERT_TRUE(gpu);
  ASSERT_TRUE(gpu->prefix_caching());
  const int64_t vocab = gpu->model().config().vocab_size;
  std::mt19937 gen(13);
  std::vector<int32_t> ids(45);
  for (int32_t& id : ids) id = static_cast<int32_t>(gen() % vocab);
  const FedRun cold = Feed(*gpu, ids, ids.size(), 0);
  auto warm = gpu->AddSequence();
  ASSERT_TRUE(warm.ok());
  ASSERT_TRUE(gpu->Forward({{*warm, {ids.begin(), ids.begin() + 37}}}).ok());
  auto taken = gpu->Snapshot(*warm);
  ASSERT_TRUE(taken.ok() && *taken) << taken.status();
  ASSERT_TRUE(gpu->RemoveSequence(*warm).ok());
  PrefixLookup lookup;
  auto seq = gpu->AddSequence(ids, &lookup);
  ASSERT_TRUE(seq.ok()) << seq.status();
  ASSERT_EQ(lookup.outcome, PrefixOutcome::kHit);
  ASSERT_EQ(lookup.hit_tokens, 37);
  auto out = gpu->Forward({{*seq, {ids.begin() + 37, ids.end()}, true}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->logits.size(), (ids.size() - 37) * vocab);
  EXPECT_EQ(
      0, std::memcmp(out->logits.data(), cold.logits.data() + 37 * vocab, out->logits.size() * 4));
}

// A prompt with two images, fed in chunks of `chunk` with its rows and M-RoPE positions as the
// worker attaches them; the logits at every position.
std::vector<float> FeedImagePrompt(SequenceRunner& e, const std::vector<int32_t>& tokens,
                                   const PromptImages& images, int64_t chunk) {
  auto seq = e.AddSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  std::vector<float> all;
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t end = std::min(n, i + chunk);
    SequenceInput in{*seq, std::vector<int32_t>(tokens.begin() + i, tokens.begin() + end),
                     /*all_logits=*/true};
    AttachImageInputs(images, i, in);
    auto out = e.Forward({in});
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) break;
    all.insert(all.end(), out->logits.begin(), out->logits.end());
  }
  EXPECT_TRUE(e.RemoveSequence(*seq).ok());
  return all;
}

// After the image prompt on the same engine: text alone (a step with no image inputs after
// steps with them), then the image prompt and the text side by side in one batch (text tokens
// take their own positions on the image path); every logit, in order.
std::vector<float> FeedTextAfterAndBeside(SequenceRunner& e, const std::vector<int32_t>& tokens,
                                          const PromptImages& images,
                                          const std::vector<int32_t>& text) {
  std::vector<float> all;
  const auto keep = [&](const absl::StatusOr<ForwardResult>& out) {
    EXPECT_TRUE(out.ok()) << out.status();
    if (out.ok()) all.insert(all.end(), out->logits.begin(), out->logits.end());
  };
  auto alone = e.AddSequence();
  EXPECT_TRUE(alone.ok());
  keep(e.Forward({{*alone, text, /*all_logits=*/true}}));
  EXPECT_TRUE(e.RemoveSequence(*alone).ok());
  auto image = e.AddSequence(), beside = e.AddSequence();
  EXPECT_TRUE(image.ok() && beside.ok());
  const int64_t split = 10, n = static_cast<int64_t>(tokens.size());
  SequenceInput first{*image, std::vector<int32_t>(tokens.begin(), tokens.begin() + split), true};
  AttachImageInputs(images, 0, first);
  keep(e.Forward({first, {*beside, text, true}}));
  SequenceInput rest{*image, std::vector<int32_t>(tokens.begin() + split, tokens.end()), true};
  AttachImageInputs(images, split, rest);
  keep(e.Forward({{*beside, {text[0]}, true}, rest}));
  EXPECT_EQ(n, split + static_cast<int64_t>(rest.tokens.size()));
  EXPECT_TRUE(e.RemoveSequence(*image).ok());
  EXPECT_TRUE(e.RemoveSequence(*beside).ok());
  return all;
}

TEST_P(CudaEngine, ImageInputsMatchTheCpuBitForBit) {
  auto cpu = MakeEngine(path_, Device::kCpu, kv_);
  auto gpu = MakeEngine(path_, Device::kCuda, kv_);
  ASSERT_TRUE(cpu && gpu);
  const Qwen35Config& c = cpu->model().config();
  PromptImages images;
  images.width = c.embedding_length;
  images.spans = {{.first = 3, .grid_h = 2, .grid_w = 3}, {.first = 12, .grid_h = 1, .grid_w = 2}};
  std::mt19937 gen(17);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (const ImageSpan& span : images.spans) {
    images.digests.push_back(gen());
    for (int64_t i = 0; i < span.tokens() * images.width; ++i) images.rows.push_back(normal(gen));
  }
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<int32_t> prompt(20), text(9);
  for (int32_t& t : prompt) t = id(gen);
  for (int32_t& t : text) t = id(gen);
  const std::vector<int32_t> tokens = KeyImageTokens(prompt, images);
  const std::vector<float> want = FeedImagePrompt(*cpu, tokens, images, 1000);
  ASSERT_EQ(want.size(), tokens.size() * c.vocab_size);
  for (int64_t chunk : {int64_t{1000}, int64_t{4}}) {
    const std::vector<float> got = FeedImagePrompt(*gpu, tokens, images, chunk);
    ASSERT_EQ(want.size(), got.size()) << "chunks of " << chunk;
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
        << "chunks of " << chunk << "; mean KL " << MeanKl(want, got, c.vocab_size);
  }
  const std::vector<float> want_after = FeedTextAfterAndBeside(*cpu, tokens, images, text);
  const std::vector<float> got_after = FeedTextAfterAndBeside(*gpu, tokens, images, text);
  ASSERT_EQ(want_after.size(), (2 * text.size() + tokens.size() + 1) * c.vocab_size);
  ASSERT_EQ(want_after.size(), got_after.size());
  EXPECT_EQ(0, std::memcmp(want_after.data(), got_after.data(), want_after.size() * sizeof(float)))
      << "text after and beside an image prompt; mean KL "
      << MeanKl(want_after, got_after, c.vocab_size);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaEngine,
                         ::testing::Values("tiny_pq2_0", "tiny_ptq1_0", "small_pq2_0", "peer",
                                           "tiny_pq2_0_q8kv", "small_pq2_0_q4kv"));

// Speculative verification on CUDA (GatedDeltaNet state planes on the device): steps of four
// drafts, alternately all right, half right and all wrong, each rolled back to what greedy
// decoding keeps; every kept position's logits equal plain CPU decoding's bit for bit.
TEST_P(CudaEngine, SpeculativeStepsEqualPlainDecoding) {
  auto cpu = MakeEngine(path_, Device::kCpu, kv_);
  auto gpu = MakeEngine(path_, Device::kCuda, kv_);
  ASSERT_TRUE(cpu && gpu);
  const int64_t vocab = cpu->model().config().vocab_size;
  std::mt19937 gen(29);
  std::vector<int32_t> prompt(21);
  for (int32_t& id : prompt) id = static_cast<int32_t>(gen() % vocab);
  // The reference: the prompt, then 24 greedy tokens, with the logits of every position.
  const FedRun ref = Feed(*cpu, prompt, prompt.size(), 24);
  std::vector<int32_t> tokens = prompt;
  tokens.insert(tokens.end(), ref.greedy.begin(), ref.greedy.end());
  auto seq = gpu->AddSequence();
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE(gpu->Forward({{*seq, {prompt.begin(), prompt.end() - 1}}}).ok());
  std::vector<float> plain_rows;  // the reference's rows from the last prompt token on
  {
    auto again = cpu->AddSequence();
    ASSERT_TRUE(again.ok());
    auto out = cpu->Forward({{*again, tokens, /*all_logits=*/true}});
    ASSERT_TRUE(out.ok()) << out.status();
    plain_rows = out->logits;
    ASSERT_TRUE(cpu->RemoveSequence(*again).ok());
  }
  int step = 0;
  for (int64_t pos = static_cast<int64_t>(prompt.size()) - 1;
       pos + 5 < static_cast<int64_t>(tokens.size()); ++step) {
    const int right = step % 3 == 0 ? 4 : step % 3 == 1 ? 2 : 0;
    std::vector<int32_t> input = {tokens[pos]};
    for (int j = 0; j < 4; ++j) {
      const int32_t truth = tokens[pos + 1 + j];
      input.push_back(j < right ? truth : static_cast<int32_t>((truth + 1) % vocab));
    }
    auto out = gpu->Forward({{*seq, input, /*all_logits=*/true, /*keep_states=*/true}});
    ASSERT_TRUE(out.ok()) << out.status();
    int kept = 0;
    while (kept < 4 && Argmax(out->RowLogits(kept), vocab) == input[kept + 1]) ++kept;
    EXPECT_EQ(kept, right) << "step " << step;
    for (int j = 0; j <= kept; ++j) {
      EXPECT_EQ(0, std::memcmp(out->RowLogits(j), plain_rows.data() + (pos + j) * vocab,
                               vocab * sizeof(float)))
          << "position " << pos + j << ", step " << step;
    }
    ASSERT_TRUE(gpu->Rollback(*seq, pos + 1 + kept).ok());
    pos += 1 + kept;
  }
  EXPECT_GE(step, 4);
}

// CUDA ranks over NCCL (worker/parallel/nccl_communicator.h) in one process, on as many devices
// as there are (ranks share one where there are fewer: tests/gpu/run.sh sets
// NCCL_MULTI_RANK_GPU_ENABLE=1): logits bit-identical to one CUDA rank and to the CPU, through
// chunked prefill and greedy decode. With WALSH_REQUIRE_NCCL=1 (the GPU check) a missing NCCL
// fails instead of skipping.
class CudaTensorParallel : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CudaTensorParallel, RanksOverNcclGiveTheBitsOfOne) {
  SKIP_WITHOUT_CUDA();
  if (auto api = nccl::LoadApi(); !api.ok()) {
    const char* required = std::getenv("WALSH_REQUIRE_NCCL");
    if (required != nullptr && std::string(required) == "1") FAIL() << api.status();
    GTEST_SKIP() << api.status();
  }
  const auto& [preset, tp] = GetParam();
  testing::TempDir dir;
  auto m = SyntheticModel::Create({.preset = preset, .format = TernaryFormat::kPq2_0, .seed = 5});
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string path = dir.File("m.gguf");
  ASSERT_TRUE((*m)->WritePacked(path).ok());
  auto cpu = MakeEngine(path, Device::kCpu);
  auto one = MakeEngine(path, Device::kCuda);
  auto ranks = MakeEngine(path, Device::kCuda, KvCacheDtype::kFp16, nullptr, tp);
  ASSERT_TRUE(cpu && one && ranks);
  std::mt19937 gen(23);
  std::vector<int32_t> ids(37);
  for (int32_t& id : ids) id = static_cast<int32_t>(gen() % cpu->model().config().vocab_size);
  const FedRun want = Feed(*cpu, ids, 16, 8);
  auto timed = [&](SequenceRunner& e, FedRun* run) {
    (void)Feed(e, ids, 16, 8);  // warm: uploads, NCCL's first collectives
    const auto start = std::chrono::steady_clock::now();
    *run = Feed(e, ids, 16, 8);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  FedRun single, got;
  const double one_s = timed(*one, &single), tp_s = timed(*ranks, &got);
  // 3 prefill chunks and 8 decode steps; the difference over their layers is what the
  // collectives cost (with TP's ranks sharing this GPU's bandwidth: not a speed-up).
  const int64_t layers = cpu->model().config().block_count;
  std::printf("cuda tp %d (%s): 11 steps in %.3f s, one rank %.3f s; %.1f us more per layer-step\n",
              tp, preset.c_str(), tp_s, one_s, 1e6 * (tp_s - one_s) / (11.0 * layers));
  ASSERT_EQ(got.logits.size(), want.logits.size());
  EXPECT_EQ(0, std::memcmp(got.logits.data(), single.logits.data(), got.logits.size() * 4));
  EXPECT_EQ(0, std::memcmp(got.logits.data(), want.logits.data(), got.logits.size() * 4));
  EXPECT_EQ(got.greedy, want.greedy);
  EXPECT_FALSE(ranks->engine().broken());
}

INSTANTIATE_TEST_SUITE_P(Ranks, CudaTensorParallel,
                         ::testing::Combine(::testing::Values("tiny", "small"),
                                            ::testing::Values(2, 4)));

// The CUDA step profile (worker/engine/cuda_op_timeline.h): every launch of the steps charged its
// device time, the products among them (on the small preset both layouts), and the profile
// changes no logit.
TEST(CudaProfile, ChargesTheStepsOpsAndChangesNoLogit) {
  SKIP_WITHOUT_CUDA();
  testing::TempDir dir;
  auto m = SyntheticModel::Create({.preset = "small", .format = TernaryFormat::kPq2_0, .seed = 5});
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string path = dir.File("m.gguf");
  ASSERT_TRUE((*m)->WritePacked(path).ok());
  OpProfile profile;
  auto plain = MakeEngine(path, Device::kCuda);
  auto timed = MakeEngine(path, Device::kCuda, KvCacheDtype::kFp16, &profile);
  ASSERT_TRUE(plain && timed);
  std::vector<int32_t> ids(24);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(7 * i + 3);
  const FedRun a = Feed(*plain, ids, ids.size(), 4);
  const FedRun b = Feed(*timed, ids, ids.size(), 4);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * 4), 0);
  EXPECT_EQ(a.greedy, b.greedy);
  double total = 0;
  bool products = false;
  for (const OpProfile::Entry& e : profile.Entries()) {
    EXPECT_GE(e.seconds, 0) << e.op;
    total += e.seconds;
    if (e.op == "ternary matmul") products = e.calls >= 5 && e.seconds > 0;
  }
  EXPECT_TRUE(products);
  EXPECT_GT(total, 0);
}

TEST(CudaPeerConformance, GreedyIdenticalToThePeer) {
  SKIP_WITHOUT_CUDA();
  auto gpu = MakeEngine(TestDataPath("peer/model.gguf"), Device::kCuda);
  ASSERT_TRUE(gpu);
  const nlohmann::json spec =
      nlohmann::json::parse(ReadFileOrDie(TestDataPath("peer/prompts.json")));
  for (const auto& prompt : spec["prompts"]) {
    SCOPED_TRACE(prompt["name"].get<std::string>());
    const FedRun run = Feed(*gpu, prompt["ids"].get<std::vector<int32_t>>(), 1 << 20, 32);
    EXPECT_EQ(run.greedy, prompt["greedy"].get<std::vector<int32_t>>());
  }
}

}  // namespace
}  // namespace walsh
