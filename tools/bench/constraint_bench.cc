#include "tools/bench/constraint_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/cli_flags.h"
#include "constraint/constraint_cache.h"
#include "constraint/grammar_matcher.h"
#include "constraint/mask_prefetcher.h"
#include "nlohmann/json.hpp"
#include "tools/bench/report.h"
#include "tools/bench/stopwatch.h"
#include "worker/engine/generation.h"
#include "worker/engine/solo_runner.h"
#include "worker/model/model_file.h"
#include "worker/model/tokenizer_trie.h"

namespace walsh {
namespace {

struct Workload {
  std::string name;
  ConstraintSpec spec;
  std::string document;  // a text the constraint accepts, walked token by token
  std::string next;      // another, walked once the caches hold what the first filled
};

std::vector<Workload> Workloads() {
  const std::string schema = R"({
    "type": "object",
    "properties": {
      "id": {"type": "string", "format": "uuid"},
      "name": {"type": "string", "maxLength": 64},
      "status": {"enum": ["active", "suspended", "deleted"]},
      "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"},
        "country": {"enum": ["DE", "FR", "JP", "US", "BR"]}},
        "required": ["street", "city", "country"], "additionalProperties": false},
      "orders": {"type": "array", "maxItems": 20, "items": {"type": "object", "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
        "quantity": {"type": "integer", "minimum": 1},
        "price": {"type": "number"},
        "tags": {"type": "array", "items": {"enum": ["gift", "express", "fragile"]}}},
        "required": ["sku", "quantity", "price"], "additionalProperties": false}}
    },
    "required": ["id", "name", "status", "address", "orders"],
    "additionalProperties": false})";
  const std::string doc =
      R"({"id": "3f2b8c1e-9a4d-4e5f-8b6a-1c2d3e4f5a6b", "name": "Ada Lovelace", "status": )"
      R"("active", "age": 36, "address": {"street": "12 St James's Square", "city": "London", )"
      R"("country": "US"}, "orders": [{"sku": "ABC-1234", "quantity": 2, "price": 19.99, )"
      R"("tags": ["gift", "express"]}, {"sku": "XYZ-0007", "quantity": 1, "price": 250}]})";
  const std::string any =
      R"({"model": "walsh", "choices": [{"index": 0, "text": "Hello, world! The answer is 42.", )"
      R"("logprobs": null, "finish_reason": "stop"}], "usage": {"prompt_tokens": 12, )"
      R"("completion_tokens": 9, "total_tokens": 21}, "nested": {"a": [1, 2.5, -3e2, true, )"
      R"(false, null, {"b": "c"}]}})";
  const std::string doc2 =
      R"({"id": "00000000-1111-4222-a333-444455556666", "name": "Émile \"Z\" Borel", )"
      R"("status": "suspended", "address": {"street": "Rue d'Ulm 45", "city": "Paris", )"
      R"("country": "FR"}, "orders": [{"sku": "QRS-9000", "quantity": 12, "price": 0.5, )"
      R"("tags": []}, {"sku": "LMN-4321", "quantity": 3, "price": 1e3, "tags": ["fragile"]}, )"
      R"({"sku": "ABC-0001", "quantity": 1, "price": 7}]})";
  const std::string any2 =
      R"({"messages": [{"role": "user", "content": "What is 6 * 7?", "meta": {"ts": 1700000000, )"
      R"("lang": "en", "flags": [false, null]}}, {"role": "assistant", "content": "42", )"
      R"("score": -0.125, "tool_calls": [{"name": "calc", "arguments": {"expr": "6*7"}}]}]})";
  std::vector<Workload> out;
  out.push_back({"json_schema", {ConstraintSpec::Kind::kJsonSchema, schema}, doc, doc2});
  out.push_back({"json_object", {ConstraintSpec::Kind::kJsonObject, ""}, any, any2});
  out.push_back({"regex",
                 {ConstraintSpec::Kind::kRegex,
                  R"((Mr|Ms|Dr)\. [A-Z][a-z]{1,15} [A-Z][a-z]{1,20}, born \d{4}-\d{2}-\d{2}, )"
                  R"(tel\. \+\d{1,3} \d{3} \d{4})"},
                 "Dr. Grace Hopper, born 1906-12-09, tel. +1 212 5550",
                 "Ms. Ada Lovelace, born 1815-12-10, tel. +44 207 1234"});
  return out;
}

// Masks along `ids`: each step's FillMask timed, then the document's own token taken.
absl::StatusOr<std::vector<double>> Walk(std::shared_ptr<const CompiledGrammar> g,
                                         const std::vector<int32_t>& ids) {
  GrammarMatcher m(std::move(g));
  std::vector<uint64_t> mask;
  std::vector<double> times;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto t = SteadyClock::now();
    m.FillMask(mask);
    times.push_back(Since(t));
    if (!((mask[ids[i] >> 6] >> (ids[i] & 63)) & 1) || !m.AcceptToken(ids[i])) {
      return absl::InternalError("the document's token " + std::to_string(i) +
                                 " is not in the mask: the workload is wrong");
    }
  }
  if (!m.CanEnd()) return absl::InternalError("the document is incomplete for its constraint");
  return times;
}

}  // namespace

int ConstraintBenchMain(int argc, char** argv) {
  std::string model_path, json_path;
  int64_t batch = 0, steps = 24, repeats = 20, threads = 2;
  FlagSet flags("walsh-bench constraint --model FILE [--batch N] [--steps N] [--json FILE]");
  flags.String("model", &model_path,
               "GGUF model file (required): its vocabulary, and its "
               "weights with --batch");
  flags.Int("batch", &batch,
            "also time decode steps at this batch with and without "
            "constraints (0: masks only)");
  flags.Int("steps", &steps, "decode steps per timed block with --batch");
  flags.Int("repeats", &repeats, "warm walks of each document");
  flags.Int("constraint-threads", &threads,
            "with --batch: mask threads for the overlapped blocks (as walsh-worker's flag)");
  flags.String("json", &json_path, "also write the results as JSON to this file");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    return Fail("walsh-bench constraint", 2, std::string(s.message()) + "\n" + flags.Help());
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (model_path.empty() || batch < 0 || steps < 1 || repeats < 1 || threads < 1) {
    return Fail("walsh-bench constraint", 2, "bad arguments\n" + flags.Help());
  }
  auto file = LoadModelFile(model_path);
  if (!file.ok())
    return Fail("walsh-bench constraint", 1, "refused: " + std::string(file.status().message()));
  auto tokenizer = Tokenizer::FromGguf(*file->gguf);
  if (!tokenizer.ok())
    return Fail("walsh-bench constraint", 1, std::string(tokenizer.status().message()));
  auto t0 = SteadyClock::now();
  std::shared_ptr<const TokenTrie> trie = TokenizerTrie(**tokenizer);
  const double trie_s = Since(t0);
  std::printf("vocabulary %lld tokens; trie built in %.0f ms (%zu nodes), one core\n",
              static_cast<long long>((*tokenizer)->vocab_size()), 1e3 * trie_s,
              trie->nodes().size());
  nlohmann::json doc = {
      {"model", model_path}, {"vocab", (*tokenizer)->vocab_size()}, {"trie_ms", 1e3 * trie_s}};
  std::printf(
      "| constraint  | compile ms | tokens | cold p50 us | cold p99 us | cold max ms | "
      "next p50 us | next p99 us | next max ms | warm p50 us | warm p99 us | over 1 ms | "
      "contexts  | cache MB | warm-up ms | warmed | warmed MB | warmed-up p50 us | "
      "warmed-up p99 us | warmed-up max ms | over 1 ms |\n");
  std::printf(
      "|-------------|------------|--------|-------------|-------------|-------------|"
      "-------------|-------------|-------------|-------------|-------------|-----------|"
      "-----------|----------|------------|--------|-----------|------------------|"
      "------------------|------------------|-----------|\n");
  std::vector<std::pair<std::string, ConstraintSpec>> compiled;
  for (const Workload& w : Workloads()) {
    t0 = SteadyClock::now();
    auto grammar = ConstraintGrammar(w.spec);
    if (!grammar.ok())
      return Fail("walsh-bench constraint", 3,
                  w.name + ": " + std::string(grammar.status().message()));
    auto g = std::make_shared<const CompiledGrammar>(*grammar, trie);
    const double compile_s = Since(t0);
    const std::vector<int32_t> ids = (*tokenizer)->Encode(w.document, false);
    auto cold = Walk(g, ids);
    if (!cold.ok())
      return Fail("walsh-bench constraint", 3,
                  w.name + ": " + std::string(cold.status().message()));
    auto next = Walk(g, (*tokenizer)->Encode(w.next, false));
    if (!next.ok())
      return Fail("walsh-bench constraint", 3,
                  w.name + ": " + std::string(next.status().message()));
    std::vector<double> warm;
    for (int64_t r = 0; r < repeats; ++r) {
      auto again = Walk(g, ids);
      if (!again.ok())
        return Fail("walsh-bench constraint", 3, std::string(again.status().message()));
      warm.insert(warm.end(), again->begin(), again->end());
    }
    const double cold_max = *std::max_element(cold->begin(), cold->end());
    const double next_max = *std::max_element(next->begin(), next->end());
    int64_t over_1ms = 0;  // of every step timed: cold, next and warm
    for (const std::vector<double>* v : {&*cold, &*next, &warm}) {
      over_1ms += std::count_if(v->begin(), v->end(), [](double t) { return t > 1e-3; });
    }
    const size_t timed = cold->size() + next->size() + warm.size();
    // A second compile, warmed first as the worker's mask threads do while a new constraint's
    // request is prefilled (one core here), then both documents: what a request sees when its
    // prefill outlasts the warm-up.
    auto warmed = std::make_shared<const CompiledGrammar>(*grammar, trie);
    t0 = SteadyClock::now();
    while (warmed->WarmNext()) {
    }
    const double warm_up_s = Since(t0);
    auto first_warmed = Walk(warmed, ids);
    if (!first_warmed.ok())
      return Fail("walsh-bench constraint", 3, std::string(first_warmed.status().message()));
    auto next_warmed = Walk(warmed, (*tokenizer)->Encode(w.next, false));
    if (!next_warmed.ok())
      return Fail("walsh-bench constraint", 3, std::string(next_warmed.status().message()));
    std::vector<double> warmed_up = *first_warmed;
    warmed_up.insert(warmed_up.end(), next_warmed->begin(), next_warmed->end());
    const double warmed_up_max = *std::max_element(warmed_up.begin(), warmed_up.end());
    const int64_t warmed_up_over_1ms =
        std::count_if(warmed_up.begin(), warmed_up.end(), [](double t) { return t > 1e-3; });
    std::printf(
        "| %-11s | %10.2f | %6zu | %11.1f | %11.1f | %11.2f | %11.1f | %11.1f | %11.2f | "
        "%11.1f | %11.1f | %4lld/%-4zu | %9lld | %8.2f | %10.1f | %6zu | %9.2f | %16.1f | %16.1f | "
        "%16.2f | %4lld/%-4zu |\n",
        w.name.c_str(), 1e3 * compile_s, ids.size(), 1e6 * Percentile(*cold, 0.5),
        1e6 * Percentile(*cold, 0.99), 1e3 * cold_max, 1e6 * Percentile(*next, 0.5),
        1e6 * Percentile(*next, 0.99), 1e3 * next_max, 1e6 * Percentile(warm, 0.5),
        1e6 * Percentile(warm, 0.99), static_cast<long long>(over_1ms), timed,
        static_cast<long long>(g->cached_contexts()), g->cached_bytes() / 1e6, 1e3 * warm_up_s,
        warmed->warm_contexts(), warmed->cached_bytes() / 1e6, 1e6 * Percentile(warmed_up, 0.5),
        1e6 * Percentile(warmed_up, 0.99), 1e3 * warmed_up_max,
        static_cast<long long>(warmed_up_over_1ms), warmed_up.size());
    doc["constraints"].push_back({{"name", w.name},
                                  {"compile_ms", 1e3 * compile_s},
                                  {"tokens", ids.size()},
                                  {"cold_p50_us", 1e6 * Percentile(*cold, 0.5)},
                                  {"cold_p99_us", 1e6 * Percentile(*cold, 0.99)},
                                  {"cold_max_ms", 1e3 * cold_max},
                                  {"next_tokens", next->size()},
                                  {"next_p50_us", 1e6 * Percentile(*next, 0.5)},
                                  {"next_p99_us", 1e6 * Percentile(*next, 0.99)},
                                  {"next_max_ms", 1e3 * next_max},
                                  {"warm_p50_us", 1e6 * Percentile(warm, 0.5)},
                                  {"warm_p99_us", 1e6 * Percentile(warm, 0.99)},
                                  {"steps_over_1ms", over_1ms},
                                  {"steps_timed", timed},
                                  {"cached_contexts", g->cached_contexts()},
                                  {"cache_bytes", g->cached_bytes()},
                                  {"warm_up_ms", 1e3 * warm_up_s},
                                  {"warm_contexts", warmed->warm_contexts()},
                                  {"warmed_contexts_cached", warmed->cached_contexts()},
                                  {"warmed_cache_bytes", warmed->cached_bytes()},
                                  {"warmed_up_p50_us", 1e6 * Percentile(warmed_up, 0.5)},
                                  {"warmed_up_p99_us", 1e6 * Percentile(warmed_up, 0.99)},
                                  {"warmed_up_max_ms", 1e3 * warmed_up_max},
                                  {"warmed_up_steps_over_1ms", warmed_up_over_1ms},
                                  {"warmed_up_steps", warmed_up.size()}});
    compiled.emplace_back(w.name, w.spec);
  }

  if (batch > 0) {
    // Decode steps at `batch`: the forward pass, then each sequence's Generation::Advance
    // (sampling, and for the constrained rows the mask), as the worker's scheduler runs them:
    // with the masks computed after the pass on this thread, or during it on the prefetcher's,
    // which in the last kind of block also warm the grammar from its compile on, as the
    // worker's do. Each block compiles its constraint afresh, so its masks start cold (a new
    // schema).
    auto bound = Model::Bind(std::move(*file));
    if (!bound.ok())
      return Fail("walsh-bench constraint", 1, std::string(bound.status().message()));
    CacheOptions caches;
    caches.state_slots = batch;
    caches.kv_pages = batch * (steps * 6 + 64) / caches.page_size + 2 * batch + 2;
    auto runner = SoloRunner::Create(std::move(*bound), EngineOptions{}, caches);
    if (!runner.ok())
      return Fail("walsh-bench constraint", 1, std::string(runner.status().message()));
    SoloRunner& e = **runner;
    std::printf("\ndecode steps at batch %lld (%lld steps per block, blocks alternate):\n",
                static_cast<long long>(batch), static_cast<long long>(steps));
    std::printf(
        "| constraint  | unconstrained ms/step | after the pass ms/step | overhead | overlapped "
        "ms/step | overhead | overlapped, warmed ms/step | overhead | sampling ms/step: "
        "unconstrained, after, overlapped, warmed |\n");
    std::printf(
        "|-------------|-----------------------|------------------------|----------|-----------"
        "-------|----------|---------------------------|----------|------------------------------"
        "-------------------------|\n");
    MaskPrefetcher prefetcher(static_cast<int>(threads));
    std::mt19937 rng(7);
    const std::vector<int32_t> prompt = (*tokenizer)->Encode("Reply in JSON:", false);
    struct BlockTimes {
      double step = 0, sampling = 0;  // seconds per step: all of it, and after the pass
    };
    // One block: fresh sequences and generations, a warm-up step, then `steps` timed steps.
    auto block = [&](const ConstraintSpec* spec, MaskPrefetcher* overlap,
                     bool warm) -> absl::StatusOr<BlockTimes> {
      std::shared_ptr<const CompiledGrammar> g;
      if (spec != nullptr) {
        auto grammar = ConstraintGrammar(*spec);
        if (!grammar.ok()) return grammar.status();
        g = std::make_shared<const CompiledGrammar>(*grammar, trie);
        if (warm) overlap->Warm(g);  // as the worker's cache does on a miss
      }
      std::vector<SequenceInput> in;
      std::vector<std::unique_ptr<Generation>> gens;
      for (int64_t i = 0; i < batch; ++i) {
        auto seq = e.AddSequence();
        if (!seq.ok()) return seq.status();
        in.push_back({*seq, prompt});
        GenerationRequest r;
        r.prompt = prompt;
        r.sampling.temperature = 1.0f;
        r.sampling.seed = rng();
        r.stop.max_tokens = steps + 2;
        r.constraint = g;
        gens.push_back(std::make_unique<Generation>(tokenizer->get(), std::move(r)));
      }
      BlockTimes times;
      for (int64_t k = 0; k < steps + 1; ++k) {
        const auto t = SteadyClock::now();
        if (overlap != nullptr) {
          for (auto& gen : gens) gen->PrefetchMask(*overlap);
        }
        auto out = e.Forward(in);
        if (!out.ok()) return out.status();
        const auto sampling = SteadyClock::now();
        for (int64_t i = 0; i < batch; ++i) {
          absl::StatusOr<GeneratedToken> drawn = gens[i]->Advance(out->RowLogits(i), out->vocab);
          if (!drawn.ok()) return drawn.status();
          in[i].tokens = {drawn->id};
        }
        if (k > 0) {
          times.sampling += Since(sampling) / steps;
          times.step += Since(t) / steps;
        }
      }
      for (const SequenceInput& s : in) (void)e.RemoveSequence(s.id);
      return times;
    };
    for (const auto& [name, spec] : compiled) {
      BlockTimes without, after, overlapped, warmed;
      for (int rep = 0; rep < 3; ++rep) {
        auto a = block(nullptr, nullptr, false);
        auto b = block(&spec, nullptr, false);
        auto c = block(&spec, &prefetcher, false);
        auto d = block(&spec, &prefetcher, true);
        for (const auto* r : {&a, &b, &c, &d}) {
          if (!r->ok())
            return Fail("walsh-bench constraint", 3, std::string(r->status().message()));
        }
        for (auto [sum, one] :
             {std::pair{&without, &*a}, {&after, &*b}, {&overlapped, &*c}, {&warmed, &*d}}) {
          sum->step += one->step / 3;
          sum->sampling += one->sampling / 3;
        }
      }
      std::printf(
          "| %-11s | %21.2f | %22.2f | %7.1f%% | %17.2f | %7.1f%% | %25.2f | %7.1f%% | %15.3f, "
          "%.3f, %.3f, %.3f |\n",
          name.c_str(), 1e3 * without.step, 1e3 * after.step, 100 * (after.step / without.step - 1),
          1e3 * overlapped.step, 100 * (overlapped.step / without.step - 1), 1e3 * warmed.step,
          100 * (warmed.step / without.step - 1), 1e3 * without.sampling, 1e3 * after.sampling,
          1e3 * overlapped.sampling, 1e3 * warmed.sampling);
      doc["steps"].push_back({{"name", name},
                              {"batch", batch},
                              {"constraint_threads", threads},
                              {"unconstrained_ms_per_step", 1e3 * without.step},
                              {"after_pass_ms_per_step", 1e3 * after.step},
                              {"overlapped_ms_per_step", 1e3 * overlapped.step},
                              {"overlapped_warmed_ms_per_step", 1e3 * warmed.step},
                              {"overlapped_warmed_sampling_ms_per_step", 1e3 * warmed.sampling},
                              {"unconstrained_sampling_ms_per_step", 1e3 * without.sampling},
                              {"after_pass_sampling_ms_per_step", 1e3 * after.sampling},
                              {"overlapped_sampling_ms_per_step", 1e3 * overlapped.sampling}});
    }
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << doc.dump(2) << "\n";
    if (!out) return Fail("walsh-bench constraint", 3, "cannot write " + json_path);
  }
  return 0;
}

}  // namespace walsh
