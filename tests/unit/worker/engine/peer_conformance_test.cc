// The engine against another engine's logits (fixtures/peer: PrismML's llama.cpp fork on a tiny
// Prism-folded PQ2_0 model). The check its README states: 32-token greedy continuations
// identical, pooled mean KL(peer || ours) over all prompt positions <= 1e-3.
#include <cmath>
#include <cstring>

#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"
#include "worker/engine/solo_runner.h"

namespace walsh {
namespace {

using testing::ReadFileOrDie;
using testing::TestDataPath;

double KlDivergence(const float* p_logits, const float* q_logits, int64_t n) {
  auto log_softmax = [n](const float* x, std::vector<double>& out) {
    double mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, double{x[i]});
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double{x[i]} - mx);
    out.resize(n);
    for (int64_t i = 0; i < n; ++i) out[i] = double{x[i]} - mx - std::log(sum);
  };
  std::vector<double> lp, lq;
  log_softmax(p_logits, lp);
  log_softmax(q_logits, lq);
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return kl;
}

struct PeerSetup {
  const char* name;
  bool int8_activations;
  KvCacheDtype kv;
  double kl_budget;
  bool greedy_identical;  // else the agreement is reported
};

class PeerConformance : public ::testing::TestWithParam<PeerSetup> {};

TEST_P(PeerConformance, GreedyIdenticalAndKlWithinBudget) {
  auto file = LoadModelFile(TestDataPath("peer/model.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  auto model = Model::Bind(std::move(*file));
  ASSERT_TRUE(model.ok()) << model.status();
  const PeerSetup& setup = GetParam();
  EngineOptions opts;
  opts.quantize_activations = setup.int8_activations;
  opts.kv_cache_dtype = setup.kv;
  auto engine = SoloRunner::Create(std::move(*model), opts);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const nlohmann::json spec =
      nlohmann::json::parse(ReadFileOrDie(TestDataPath("peer/prompts.json")));
  const int64_t vocab = spec["n_vocab"];
  double kl_sum = 0;
  int positions = 0, greedy_agreed = 0, greedy_total = 0;
  for (const auto& prompt : spec["prompts"]) {
    SCOPED_TRACE(prompt["name"].get<std::string>());
    const std::vector<int32_t> ids = prompt["ids"].get<std::vector<int32_t>>();
    const std::string ref =
        ReadFileOrDie(TestDataPath("peer/" + prompt["logits_file"].get<std::string>()));
    ASSERT_EQ(ref.size(), ids.size() * vocab * 4);
    auto seq = (*engine)->AddSequence();
    ASSERT_TRUE(seq.ok());
    auto out = (*engine)->Forward({{*seq, ids, /*all_logits=*/true}});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->rows.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      kl_sum += KlDivergence(reinterpret_cast<const float*>(ref.data()) + i * vocab,
                             out->RowLogits(i), vocab);
      ++positions;
    }
    // Greedy continuation, each token fed back as a one-token decode step.
    std::vector<int32_t> greedy;
    int32_t next = static_cast<int32_t>(Argmax(out->RowLogits(ids.size() - 1), vocab));
    for (int k = 0; k < 32; ++k) {
      greedy.push_back(next);
      auto step = (*engine)->Forward({{*seq, {next}}});
      ASSERT_TRUE(step.ok()) << step.status();
      next = static_cast<int32_t>(Argmax(step->RowLogits(0), vocab));
    }
    const std::vector<int32_t> expected = prompt["greedy"].get<std::vector<int32_t>>();
    if (setup.greedy_identical) {
      EXPECT_EQ(greedy, expected);
    }
    // Agreement: the tokens before the first that differs.
    size_t agreed = 0;
    while (agreed < greedy.size() && agreed < expected.size() && greedy[agreed] == expected[agreed])
      ++agreed;
    greedy_agreed += static_cast<int>(agreed);
    greedy_total += static_cast<int>(expected.size());
    ASSERT_TRUE((*engine)->RemoveSequence(*seq).ok());
  }
  const double mean_kl = kl_sum / positions;
  EXPECT_EQ(positions, 63);
  EXPECT_LE(mean_kl, setup.kl_budget);
  std::printf(
      "peer conformance (%s activations, %s KV): pooled mean KL %.3e over %d positions; greedy "
      "agreement %d of %d tokens\n",
      setup.int8_activations ? "int8" : "fp32", KvCacheDtypeName(setup.kv), mean_kl, positions,
      greedy_agreed, greedy_total);
}

// fp16 KV: the README's budget; q8: at most 2e-3 and the same greedy tokens; q4: reported, held
// to a looser bound.
INSTANTIATE_TEST_SUITE_P(
    Activations, PeerConformance,
    ::testing::Values(PeerSetup{"Int8", true, KvCacheDtype::kFp16, 1e-3, true},
                      PeerSetup{"Fp32", false, KvCacheDtype::kFp16, 1e-3, true},
                      PeerSetup{"Int8Q8Kv", true, KvCacheDtype::kQ8, 2e-3, true},
                      PeerSetup{"Int8Q4Kv", true, KvCacheDtype::kQ4, 2e-2, false}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace walsh
