#include "worker/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace walsh {
namespace {

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// log-softmax of the raw logits, in double.
std::vector<double> LogSoftmax(const float* x, int64_t n) {
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] - lse;
  return out;
}

}  // namespace

double CounterUniform(uint64_t seed, int64_t output_index) {
  const uint64_t bits = Mix(Mix(seed ^ 0x5851f42d4c957f2dull) +
                            static_cast<uint64_t>(output_index) * 0x9e3779b97f4a7c15ull);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

SampledToken Sample(const float* logits, int64_t vocab, const SamplingParams& p,
                    const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                    int64_t output_index) {
  std::vector<float> l(logits, logits + vocab);
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && id < vocab) l[id] += bias;
  }
  if (p.repetition_penalty != 1.0f) {
    absl::flat_hash_set<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(output.begin(), output.end());
    for (int32_t id : seen) {
      if (id < 0 || id >= vocab) continue;
      l[id] = l[id] > 0 ? l[id] / p.repetition_penalty : l[id] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    absl::flat_hash_map<int32_t, int> counts;
    for (int32_t id : output) ++counts[id];
    for (const auto& [id, n] : counts) {
      if (id >= 0 && id < vocab) l[id] -= p.presence_penalty + p.frequency_penalty * n;
    }
  }

  SampledToken out;
  if (p.temperature <= 0.0f) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i) {
      if (l[i] > l[best]) best = i;
    }
    out.id = static_cast<int32_t>(best);
  } else {
    // Candidates by probability (ties: lower id first), then top-k, top-p, min-p.
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
    int64_t keep = vocab;
    if (p.top_k > 0 && p.top_k < vocab) {
      keep = p.top_k;
      std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
    } else {
      std::sort(order.begin(), order.end(), by_logit);
    }
    std::vector<double> prob(keep);
    const double mx = l[order[0]];
    double sum = 0;
    for (int64_t i = 0; i < keep; ++i)
      sum += prob[i] = std::exp((l[order[i]] - mx) / p.temperature);
    for (double& x : prob) x /= sum;
    if (p.top_p < 1.0f) {
      double cum = 0;
      int64_t k = 0;
      while (k < keep && cum < p.top_p) cum += prob[k++];
      keep = std::max<int64_t>(k, 1);
    }
    if (p.min_p > 0.0f) {
      int64_t k = 1;
      while (k < keep && prob[k] >= p.min_p * prob[0]) ++k;
      keep = k;
    }
    double total = 0;
    for (int64_t i = 0; i < keep; ++i) total += prob[i];
    const double u = CounterUniform(p.seed, output_index) * total;
    double cum = 0;
    out.id = order[keep - 1];
    for (int64_t i = 0; i < keep; ++i) {
      cum += prob[i];
      if (u < cum) {
        out.id = order[i];
        break;
      }
    }
  }

  const std::vector<double> lp = LogSoftmax(logits, vocab);
  out.logprob = static_cast<float>(lp[out.id]);
  if (p.logprobs > 0) {
    std::vector<int32_t> idx(vocab);
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t n = std::min<int64_t>(p.logprobs, vocab);
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
      return lp[a] > lp[b] || (lp[a] == lp[b] && a < b);
    });
    for (int64_t i = 0; i < n; ++i) out.top.emplace_back(idx[i], static_cast<float>(lp[idx[i]]));
  }
  return out;
}

}  // namespace walsh
