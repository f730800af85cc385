#include "worker/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

// Draws from softmax(l / T) after top-k, top-p and min-p, with u uniform in [0, 1).
// Without truncation the draw walks the tokens in id order: any fixed order samples the same
// distribution, and no sort is needed. With truncation it walks them by probability (ties:
// lower id first), sorting only as long a prefix as the truncation reaches: the best 64, then
// 256, 1,024, ... (nth_element, then sort of the prefix: the same order a full sort gives).
int32_t Draw(const std::vector<float>& l, const SamplingParams& p, double u) {
  const int64_t vocab = static_cast<int64_t>(l.size());
  const double mx = *std::max_element(l.begin(), l.end());
  auto weight = [&](int32_t id) { return std::exp((l[id] - mx) / p.temperature); };
  const bool top_k = p.top_k > 0 && p.top_k < vocab;
  if (!top_k && p.top_p >= 1.0f && p.min_p <= 0.0f) {
    double total = 0;
    for (int64_t i = 0; i < vocab; ++i) total += weight(static_cast<int32_t>(i));
    const double target = u * total;
    double cum = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      cum += weight(static_cast<int32_t>(i));
      if (target < cum) return static_cast<int32_t>(i);
    }
    return static_cast<int32_t>(vocab - 1);
  }
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  const int64_t limit = top_k ? p.top_k : vocab;
  double all = 0;  // the mass of the candidates, for top-p
  if (p.top_p < 1.0f) {
    if (top_k) {
      std::nth_element(order.begin(), order.begin() + limit - 1, order.end(), by_logit);
    }
    for (int64_t i = 0; i < limit; ++i) all += weight(order[i]);
  }
  // Grow the sorted prefix until the truncation ends inside it.
  int64_t sorted = 0, keep = limit;
  std::vector<double> w;
  for (int64_t want = 64;; want *= 4) {
    const int64_t k = std::min(want, limit);
    if (k < vocab)
      std::nth_element(order.begin() + sorted, order.begin() + k - 1, order.end(), by_logit);
    std::sort(order.begin() + sorted, order.begin() + k, by_logit);
    for (int64_t i = sorted; i < k; ++i) w.push_back(weight(order[i]));
    sorted = k;
    keep = k;
    bool done = k == limit;
    if (p.top_p < 1.0f) {
      double cum = 0;
      int64_t n = 0;
      while (n < k && cum < p.top_p * all) cum += w[n++];
      if (cum >= p.top_p * all) {
        keep = std::max<int64_t>(n, 1);
        done = true;
      }
    }
    if (p.min_p > 0.0f) {
      int64_t n = 1;
      while (n < keep && w[n] >= p.min_p * w[0]) ++n;
      if (n < keep) {
        keep = n;
        done = true;
      }
    }
    if (done) break;
  }
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += w[i];
  const double target = u * total;
  double cum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    cum += w[i];
    if (target < cum) return order[i];
  }
  return order[keep - 1];
}

}  // namespace

double CounterUniform(uint64_t seed, int64_t output_index) {
  const uint64_t bits = Mix(Mix(seed ^ 0x5851f42d4c957f2dull) +
                            static_cast<uint64_t>(output_index) * 0x9e3779b97f4a7c15ull);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

SampledToken Sample(const float* logits, int64_t vocab, const SamplingParams& p,
                    const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                    int64_t output_index, const std::vector<uint64_t>* allowed) {
  std::vector<float> l(logits, logits + vocab);
  if (allowed != nullptr) {
    for (int64_t i = 0; i < vocab; ++i) {
      if (!(((*allowed)[i >> 6] >> (i & 63)) & 1)) l[i] = -std::numeric_limits<float>::infinity();
    }
  }
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
    out.id = Draw(l, p, CounterUniform(p.seed, output_index));
  }

  // Logprobs under the model's own distribution: one pass for the normalizer, a partial
  // selection for the top N.
  double mx = logits[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(logits[i] - mx);
  const double lse = mx + std::log(sum);
  out.logprob = static_cast<float>(logits[out.id] - lse);
  if (p.logprobs > 0) {
    const int64_t n = std::min<int64_t>(p.logprobs, vocab);
    std::vector<int32_t> idx(vocab);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int64_t i = 0; i < n; ++i) {
      out.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
    }
  }
  return out;
}

}  // namespace walsh
