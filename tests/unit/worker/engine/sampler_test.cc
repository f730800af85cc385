// Sampler properties: greedy is argmax; top-k / top-p / min-p never emit excluded tokens;
// penalties and logit bias act as specified; the same seed gives the same tokens.
#include "worker/engine/sampler.h"

#include <cmath>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace walsh {
namespace {

std::vector<float> RandomLogits(int n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0, 3);
  std::vector<float> l(n);
  for (float& x : l) x = d(gen);
  return l;
}

std::vector<int> Ranked(const std::vector<float>& l) {
  std::vector<int> idx(l.size());
  for (size_t i = 0; i < l.size(); ++i) idx[i] = static_cast<int>(i);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return l[a] > l[b]; });
  return idx;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  std::vector<float> l = RandomLogits(1000, 1);
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(Sample(l.data(), 1000, p, {}, {}, 0).id, Ranked(l)[0]);
  std::vector<float> tie(10, 1.0f);
  tie[3] = tie[7] = 5.0f;
  EXPECT_EQ(Sample(tie.data(), 10, p, {}, {}, 0).id, 3);
}

TEST(Sampler, TruncationNeverEmitsExcludedTokens) {
  const std::vector<float> l = RandomLogits(500, 2);
  const std::vector<int> ranked = Ranked(l);
  for (int draw = 0; draw < 2000; ++draw) {
    SamplingParams k;
    k.top_k = 5;
    k.seed = draw;
    const int id = Sample(l.data(), 500, k, {}, {}, draw).id;
    ASSERT_TRUE(std::find(ranked.begin(), ranked.begin() + 5, id) != ranked.begin() + 5);
  }
  // top-p: the smallest prefix reaching the mass.
  std::vector<double> prob(500);
  double sum = 0, mx = l[ranked[0]];
  for (int i = 0; i < 500; ++i) sum += prob[i] = std::exp(l[ranked[i]] - mx);
  double cum = 0;
  int nucleus = 0;
  while (cum < 0.5 * sum) cum += prob[nucleus++];
  std::set<int> seen;
  for (int draw = 0; draw < 3000; ++draw) {
    SamplingParams p;
    p.top_p = 0.5f;
    p.seed = 77;
    seen.insert(Sample(l.data(), 500, p, {}, {}, draw).id);
  }
  for (int id : seen) {
    ASSERT_TRUE(std::find(ranked.begin(), ranked.begin() + nucleus, id) !=
                ranked.begin() + nucleus);
  }
  EXPECT_GT(seen.size(), 1u);
  // min-p: nothing below min_p x p_max.
  for (int draw = 0; draw < 2000; ++draw) {
    SamplingParams m;
    m.min_p = 0.2f;
    m.seed = 5;
    const int id = Sample(l.data(), 500, m, {}, {}, draw).id;
    ASSERT_GE(std::exp(l[id] - mx), 0.2 - 1e-6);
  }
}

TEST(Sampler, SameSeedSameTokensWhateverElseHappens) {
  const std::vector<float> l = RandomLogits(300, 3);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  std::vector<int> a, b;
  for (int i = 0; i < 50; ++i) a.push_back(Sample(l.data(), 300, p, {}, {}, i).id);
  // Interleave with other requests' draws: counters are per (seed, index), no shared state.
  SamplingParams other = p;
  other.seed = 99;
  for (int i = 0; i < 50; ++i) {
    (void)Sample(l.data(), 300, other, {}, {}, i);
    b.push_back(Sample(l.data(), 300, p, {}, {}, i).id);
  }
  EXPECT_EQ(a, b);
  p.seed = 1235;
  std::vector<int> c;
  for (int i = 0; i < 50; ++i) c.push_back(Sample(l.data(), 300, p, {}, {}, i).id);
  EXPECT_NE(a, c);
  EXPECT_EQ(CounterUniform(1, 5), CounterUniform(1, 5));
}

TEST(Sampler, PenaltiesAndBias) {
  std::vector<float> l = {2.0f, 1.9f, -1.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;  // 2.0 -> 1.0 for token 0, seen in the prompt
  EXPECT_EQ(Sample(l.data(), 4, p, {0}, {}, 0).id, 1);
  SamplingParams f;
  f.temperature = 0;
  f.frequency_penalty = 0.05f;  // token 0 seen 3 times in the output: 2.0 - 0.15 < 1.9
  EXPECT_EQ(Sample(l.data(), 4, f, {}, {0, 0, 0}, 3).id, 1);
  SamplingParams pr;
  pr.temperature = 0;
  pr.presence_penalty = 0.2f;
  EXPECT_EQ(Sample(l.data(), 4, pr, {}, {0}, 1).id, 1);
  SamplingParams bias;
  bias.temperature = 0;
  bias.logit_bias = {{2, 10.0f}};
  EXPECT_EQ(Sample(l.data(), 4, bias, {}, {}, 0).id, 2);
}

TEST(Sampler, LogprobsComeFromTheModelDistribution) {
  std::vector<float> l = {0.0f, std::log(3.0f)};
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 2;
  const SampledToken t = Sample(l.data(), 2, p, {}, {}, 0);
  EXPECT_EQ(t.id, 1);
  EXPECT_NEAR(t.logprob, std::log(0.75), 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_NEAR(t.top[1].second, std::log(0.25), 1e-6);
}

}  // namespace
}  // namespace walsh
