// walsh-bench serve: streams Generate requests at a walsh endpoint and reports what clients
// see. Closed loop (a sweep of concurrency levels, each client sending its next request when
// the last one ends) or open loop (Poisson arrivals at given rates); workloads "fixed" (one
// prompt), "random" (prompts of random words and lengths), "shared-prefix" (a long common
// system prefix and a short distinct tail), "multi-turn" (conversations of --turns requests,
// each turn the last one's prompt, its answer and a new user message, as token ids) and
// "document" (one --document-tokens document, then a distinct question, as token ids), and two
// for speculative decoding, sampled greedily as editors and summarizers are: "code-edit" (a
// source file and an instruction to return it with an edit: the answer repeats most of the
// prompt) and "summarize" (a long text, then a request for its summary). Every
// request has a fixed seed, so a reference pass (one stream at a time) gives the exact tokens
// each request must produce under load: the exactness column is the share of streams identical
// to it. With --prefix-metrics (the workers' /metrics addresses) it also reports the fleet's
// prefix-cache hit rate per level: hit tokens over looked-up tokens, summed over the workers.
//
//   walsh-bench serve --target 127.0.0.1:8080 --workload shared-prefix --concurrency 1,8,32
//       --requests 64 --max-tokens 32 --slo-ttft-ms 500 --json serve.json
#include "tools/bench/serve.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/cli_flags.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "tools/bench/http_get.h"
#include "tools/bench/report.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh {
namespace {

using Clock = std::chrono::steady_clock;

struct Outcome {
  bool ok = false;
  std::string error;
  std::vector<int32_t> prompt_ids, ids;
  double ttft = 0, e2e = 0;
  std::vector<double> gaps;  // between consecutive token messages
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Outcome Stream(v1::Generator::Stub& stub, const v1::GenerateRequest& request,
               const std::string& api_key, double timeout_s) {
  Outcome out;
  grpc::ClientContext ctx;
  if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  const auto start = Clock::now();
  auto reader = stub.Generate(&ctx, request);
  v1::GenerateResponse msg;
  Clock::time_point last{};
  while (reader->Read(&msg)) {
    if (msg.has_started()) {
      out.prompt_ids.assign(msg.started().prompt_ids().begin(), msg.started().prompt_ids().end());
    }
    if (!msg.has_tokens()) continue;
    const auto now = Clock::now();
    if (out.ids.empty()) {
      out.ttft = Seconds(now - start);
    } else {
      out.gaps.push_back(Seconds(now - last));
    }
    last = now;
    for (const v1::Token& t : msg.tokens().tokens()) out.ids.push_back(t.id());
  }
  const grpc::Status s = reader->Finish();
  out.e2e = Seconds(Clock::now() - start);
  out.ok = s.ok();
  if (!s.ok()) out.error = std::to_string(s.error_code()) + " " + s.error_message();
  return out;
}

// One client's unit of work: a request, and for the multi-turn workload the user messages of
// the turns after it (each turn's prompt is the last one's prompt ids, its answer and the
// message's ids, so it extends the previous turn exactly).
struct Conversation {
  v1::GenerateRequest first;
  std::vector<std::vector<int32_t>> followups;
};

std::vector<int32_t> Tokenize(v1::Generator::Stub& stub, const std::string& text,
                              const std::string& api_key, std::string* error) {
  grpc::ClientContext ctx;
  if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
  v1::TokenizeRequest req;
  req.set_text(text);
  v1::TokenizeResponse resp;
  const grpc::Status s = stub.Tokenize(&ctx, req, &resp);
  if (!s.ok()) *error = "Tokenize: " + s.error_message();
  return {resp.ids().begin(), resp.ids().end()};
}

// The workload's conversations, deterministic from the seed; `n` requests in all.
std::vector<Conversation> MakeWork(const std::string& workload, int64_t n, int64_t max_tokens,
                                   int64_t turns, int64_t document_tokens,
                                   v1::Generator::Stub& stub, const std::string& api_key,
                                   std::string* error) {
  static const char* kWords[] = {"the",    "quick",    "brown",   "fox",    "jumps",  "over",
                                 "lazy",   "dog",      "model",   "token",  "stream", "gateway",
                                 "worker", "hadamard", "ternary", "bonsai", "walsh",  "rotation"};
  std::mt19937 gen(42);
  auto words = [&](int count) {
    std::string text;
    for (int w = 0; w < count; ++w) text += std::string(kWords[gen() % 18]) + " ";
    return text;
  };
  const std::string prefix = words(120);
  // A source file of small functions over the words, distinct per request.
  auto code = [&](int functions) {
    std::string text;
    for (int f = 0; f < functions; ++f) {
      const std::string name = std::string(kWords[gen() % 18]) + "_" + std::to_string(f);
      const std::string a = kWords[gen() % 18], b = kWords[gen() % 18];
      text += "def " + name + "(" + a + ", " + b + "):\n    x = " + a + " + " + b + " * " +
              std::to_string(gen() % 10) + "\n    return x\n\n";
    }
    return text;
  };
  std::vector<int32_t> document;
  std::vector<Conversation> out;
  const bool multi = workload == "multi-turn";
  for (int64_t i = 0, left = n; left > 0; ++i) {
    Conversation c;
    v1::GenerateRequest& r = c.first;
    if (workload == "fixed") {
      r.set_text("Write a short note about ternary weights.");
    } else if (workload == "shared-prefix") {
      r.set_text(prefix + words(8));
    } else if (workload == "document") {
      if (document.empty()) {
        // A long shared document of exactly document_tokens tokens (docs/prefix_caching.md).
        std::string text;
        while (static_cast<int64_t>(document.size()) < document_tokens && error->empty()) {
          text += words(200);
          document = Tokenize(stub, text, api_key, error);
        }
        document.resize(std::min<size_t>(document.size(), document_tokens));
      }
      for (int32_t id : document) r.mutable_tokens()->add_ids(id);
      for (int32_t id : Tokenize(stub, "\nquestion: " + words(10), api_key, error)) {
        r.mutable_tokens()->add_ids(id);
      }
    } else if (multi) {
      for (int32_t id :
           Tokenize(stub, "user: " + words(60 + static_cast<int>(gen() % 40)), api_key, error)) {
        r.mutable_tokens()->add_ids(id);
      }
      for (int64_t t = 1; t < std::min(turns, left); ++t) {
        c.followups.push_back(Tokenize(stub, "\nuser: " + words(12), api_key, error));
      }
    } else if (workload == "code-edit") {
      r.set_text("Rename x to total in this file and return the whole file.\n```python\n" +
                 code(12) + "```\n\n```python\n");
    } else if (workload == "summarize") {
      r.set_text(words(400) + "\n\nSummarize the text above in one paragraph.\n");
    } else {
      r.set_text(words(4 + static_cast<int>(gen() % 60)));
    }
    const bool greedy = workload == "code-edit" || workload == "summarize";
    r.mutable_sampling()->set_temperature(greedy ? 0.0f : 0.8f);
    r.mutable_sampling()->set_seed(1000 + static_cast<uint64_t>(i));
    r.mutable_stopping()->set_max_tokens(static_cast<uint32_t>(max_tokens));
    r.mutable_stopping()->set_ignore_eos(true);
    r.set_return_prompt_ids(multi);
    left -= 1 + static_cast<int64_t>(c.followups.size());
    out.push_back(std::move(c));
  }
  return out;
}

// Runs a conversation's turns in order; a failed turn ends it (the rest count as failed).
std::vector<Outcome> Converse(v1::Generator::Stub& stub, const Conversation& c,
                              const std::string& api_key, double timeout_s) {
  std::vector<Outcome> outcomes;
  v1::GenerateRequest r = c.first;
  for (size_t turn = 0;; ++turn) {
    outcomes.push_back(Stream(stub, r, api_key, timeout_s));
    const Outcome& o = outcomes.back();
    if (!o.ok || turn == c.followups.size()) break;
    if (o.prompt_ids.empty()) {
      outcomes.back().ok = false;
      outcomes.back().error = "Started brought no prompt_ids for the next turn";
      break;
    }
    r.mutable_tokens()->clear_ids();
    for (const auto* part : {&o.prompt_ids, &o.ids, &c.followups[turn]}) {
      for (int32_t id : *part) r.mutable_tokens()->add_ids(id);
    }
    r.mutable_sampling()->set_seed(r.sampling().seed() + 1);
  }
  for (size_t turn = outcomes.size(); turn <= c.followups.size(); ++turn) {
    outcomes.push_back({.error = "an earlier turn failed"});
  }
  return outcomes;
}

// The sum over the workers' /metrics of the prefix-cache counters: {queries, hits} in tokens.
absl::StatusOr<std::pair<double, double>> PrefixCounters(
    const std::vector<std::string>& endpoints) {
  double queries = 0, hits = 0;
  for (const std::string& e : endpoints) {
    absl::StatusOr<std::string> m = HttpGet(e, "/metrics");
    if (!m.ok()) return m.status();
    for (absl::string_view line : absl::StrSplit(*m, '\n')) {
      double v;
      auto value = [&](absl::string_view name) {
        return absl::StartsWith(line, name) && line.size() > name.size() &&
               line[name.size()] == ' ' && absl::SimpleAtod(line.substr(name.size() + 1), &v);
      };
      if (value("vllm:prefix_cache_queries_total")) queries += v;
      if (value("vllm:prefix_cache_hits_total")) hits += v;
    }
  }
  return std::make_pair(queries, hits);
}

// The fleet's prefix-cache hit rate over an interval: hit tokens over looked-up tokens between
// Start and Rate, from the counters summed over the workers. Off without endpoints.
class PrefixHitMeter {
 public:
  explicit PrefixHitMeter(std::vector<std::string> endpoints) : endpoints_(std::move(endpoints)) {}
  bool on() const { return !endpoints_.empty(); }
  absl::Status Start() {
    if (!on()) return absl::OkStatus();
    absl::StatusOr<std::pair<double, double>> now = PrefixCounters(endpoints_);
    if (now.ok()) start_ = *now;
    return now.status();
  }
  // -1 when off.
  absl::StatusOr<double> Rate() const {
    if (!on()) return -1.0;
    absl::StatusOr<std::pair<double, double>> now = PrefixCounters(endpoints_);
    if (!now.ok()) return now.status();
    const double queries = now->first - start_.first;
    return queries > 0 ? (now->second - start_.second) / queries : 0.0;
  }

 private:
  std::vector<std::string> endpoints_;
  std::pair<double, double> start_{0, 0};
};

struct Summary {
  std::string mode;
  double level = 0;  // concurrency or requests/s
  int64_t requests = 0, failed = 0, exact = 0, tokens = 0;
  double seconds = 0, goodput = 0;
  std::vector<double> ttft, itl, e2e;
  double prefix_hit_rate = -1;  // -1: not measured (no --prefix-metrics)
};

nlohmann::json ToJson(const Summary& s) {
  auto pct = [](const std::vector<double>& v) {
    return nlohmann::json{{"p50_ms", 1e3 * Percentile(v, 0.50)},
                          {"p90_ms", 1e3 * Percentile(v, 0.90)},
                          {"p99_ms", 1e3 * Percentile(v, 0.99)}};
  };
  return {{"mode", s.mode},
          {"level", s.level},
          {"requests", s.requests},
          {"failed", s.failed},
          {"exact_fraction", s.requests ? static_cast<double>(s.exact) / s.requests : 0.0},
          {"output_tokens_per_s", s.seconds > 0 ? s.tokens / s.seconds : 0.0},
          {"goodput_requests_per_s", s.goodput},
          {"ttft", pct(s.ttft)},
          {"inter_token", pct(s.itl)},
          {"e2e", pct(s.e2e)},
          {"prefix_cache_hit_rate",
           s.prefix_hit_rate >= 0 ? nlohmann::json(s.prefix_hit_rate) : nlohmann::json()}};
}

void PrintRow(const Summary& s) {
  std::printf(
      "| %-6s | %7.1f | %5lld | %4lld | %6.1f%% | %9.1f | %7.1f %7.1f %7.1f | %6.2f %6.2f "
      "%6.2f | %8.1f | %7.2f | %s |\n",
      s.mode.c_str(), s.level, static_cast<long long>(s.requests), static_cast<long long>(s.failed),
      s.requests ? 100.0 * static_cast<double>(s.exact) / s.requests : 0.0,
      s.seconds > 0 ? s.tokens / s.seconds : 0.0, 1e3 * Percentile(s.ttft, 0.5),
      1e3 * Percentile(s.ttft, 0.9), 1e3 * Percentile(s.ttft, 0.99), 1e3 * Percentile(s.itl, 0.5),
      1e3 * Percentile(s.itl, 0.9), 1e3 * Percentile(s.itl, 0.99), 1e3 * Percentile(s.e2e, 0.99),
      s.goodput,
      s.prefix_hit_rate >= 0 ? absl::StrFormat("%6.1f%%", 100 * s.prefix_hit_rate).c_str()
                             : "      -");
}

// Output tokens/s and the p99 time to first token against the sweep's level, as a PNG drawn
// by gnuplot from a data file beside it.
int Plot(const nlohmann::json& doc, bool open_loop, const std::string& png) {
  const std::string data = png + ".dat", script = png + ".gp";
  {
    std::ofstream d(data);
    for (const auto& r : doc["results"]) {
      d << r["level"].get<double>() << " " << r["output_tokens_per_s"].get<double>() << " "
        << r["ttft"]["p99_ms"].get<double>() << "\n";
    }
    std::ofstream g(script);
    g << "set terminal png size 900,500\nset output '" << png << "'\n"
      << "set title 'walsh-bench serve: " << doc["workload"].get<std::string>() << " on "
      << doc["target"].get<std::string>() << "'\n"
      << "set xlabel '" << (open_loop ? "requests/s (Poisson)" : "concurrent clients") << "'\n"
      << "set ylabel 'output tokens/s'\nset y2label 'TTFT p99 (ms)'\nset y2tics\nset grid\n"
      << "plot '" << data << "' using 1:2 with linespoints title 'output tokens/s', '" << data
      << "' using 1:3 axes x1y2 with linespoints title 'TTFT p99 (ms)'\n";
  }
  const std::string command = "gnuplot '" + script + "'";
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "walsh-bench serve: gnuplot failed (apt-get install gnuplot-nox)\n");
    return 3;
  }
  return 0;
}

}  // namespace

int ServeBenchMain(int argc, char** argv) {
  std::string target = "127.0.0.1:8080", workload = "random", concurrency = "1,4,16", rates,
              json_path, plot_path, api_key;
  std::string prefix_metrics;
  int64_t requests = 32, max_tokens = 32, turns = 4, document_tokens = 2000;
  double slo_ttft_ms = 1000, slo_itl_ms = 200, timeout_s = 120;
  FlagSet flags(
      "walsh-bench serve --target HOST:PORT [--workload fixed|random|shared-prefix|multi-turn|"
      "document|code-edit|summarize] "
      "[--concurrency 1,4,16 | --rates 2,8] [--requests N] [--max-tokens N] [--json FILE]");
  flags.String("target", &target, "a worker or the gateway");
  flags.String("workload", &workload,
               "fixed, random, shared-prefix, multi-turn, document, code-edit or summarize");
  flags.Int("turns", &turns, "multi-turn: requests per conversation");
  flags.Int("document-tokens", &document_tokens,
            "document: the shared document's length in tokens (each request adds a question)");
  flags.String("prefix-metrics", &prefix_metrics,
               "the workers' metrics addresses (host:port,...): report the fleet's prefix-cache "
               "hit rate per level");
  flags.String("concurrency", &concurrency, "closed-loop levels (clients), comma-separated");
  flags.String("rates", &rates,
               "open-loop Poisson rates (requests/s; conversations/s for multi-turn); replaces "
               "--concurrency");
  flags.Int("requests", &requests, "requests per level");
  flags.Int("max-tokens", &max_tokens, "tokens per request (EOS ignored)");
  flags.Double("slo-ttft-ms", &slo_ttft_ms, "goodput counts requests within this TTFT...");
  flags.Double("slo-itl-ms", &slo_itl_ms, "...and this p99 inter-token gap");
  flags.Double("timeout", &timeout_s, "deadline per request, seconds");
  flags.String("api-key", &api_key, "sent as authorization: Bearer KEY");
  flags.String("json", &json_path, "also write the results as JSON to this file");
  flags.String("plot", &plot_path, "also plot the sweep into this PNG (gnuplot)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "walsh-bench serve: %s\n%s", std::string(s.message()).c_str(),
                 flags.Help().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if ((workload != "fixed" && workload != "random" && workload != "shared-prefix" &&
       workload != "multi-turn" && workload != "document" && workload != "code-edit" &&
       workload != "summarize") ||
      requests < 1 || max_tokens < 1 || turns < 1 || document_tokens < 1) {
    std::fprintf(stderr, "walsh-bench serve: bad arguments\n%s", flags.Help().c_str());
    return 2;
  }
  std::vector<double> levels;
  const bool open_loop = !rates.empty();
  for (absl::string_view p : absl::StrSplit(open_loop ? rates : concurrency, ',')) {
    double v;
    if (!absl::SimpleAtod(p, &v) || v <= 0 || (!open_loop && v != static_cast<int>(v))) {
      std::fprintf(stderr, "walsh-bench serve: \"%s\" is not a level\n", std::string(p).c_str());
      return 2;
    }
    levels.push_back(v);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Generator::NewStub(channel);
  PrefixHitMeter meter(prefix_metrics.empty() ? std::vector<std::string>{}
                                              : absl::StrSplit(prefix_metrics, ','));
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "walsh-bench serve: %s\n", std::string(status.message()).c_str());
    return 3;
  };
  std::string error;
  const std::vector<Conversation> work =
      MakeWork(workload, requests, max_tokens, turns, document_tokens, *stub, api_key, &error);
  if (!error.empty()) {
    std::fprintf(stderr, "walsh-bench serve: %s\n", error.c_str());
    return 3;
  }

  // The reference: one stream at a time. Its prefix-cache hit rate is the workload's own (each
  // turn finds the one before); the levels after it repeat requests the caches have seen.
  if (absl::Status started = meter.Start(); !started.ok()) return fail(started);
  std::vector<std::vector<int32_t>> reference;
  std::vector<double> reference_ttft;
  for (size_t i = 0; i < work.size(); ++i) {
    for (const Outcome& o : Converse(*stub, work[i], api_key, timeout_s)) {
      if (!o.ok) {
        std::fprintf(stderr, "walsh-bench serve: reference request %zu failed: %s\n", i,
                     o.error.c_str());
        return 3;
      }
      reference.push_back(o.ids);
      reference_ttft.push_back(o.ttft);
    }
  }
  if (workload == "document") {
    // The first request computes the document, the second snapshots where it ends, the rest
    // bring new questions to it: with prefix caching, their first tokens come from the cache.
    std::printf("reference pass TTFT by request (ms):");
    for (double t : reference_ttft) std::printf(" %.1f", 1e3 * t);
    std::printf("\n");
  }
  std::printf(
      "target %s, workload %s, %zu requests of %lld tokens per level; SLO: TTFT %.0f ms, "
      "p99 inter-token %.0f ms\n",
      target.c_str(), workload.c_str(), reference.size(), static_cast<long long>(max_tokens),
      slo_ttft_ms, slo_itl_ms);
  const absl::StatusOr<double> reference_hit_rate = meter.Rate();
  if (!reference_hit_rate.ok()) return fail(reference_hit_rate.status());
  if (meter.on()) {
    std::printf("reference pass (one stream at a time): prefix-cache hit rate %.1f%%\n",
                100 * *reference_hit_rate);
  }
  std::printf(
      "| mode   |   level |  reqs | fail |   exact | output t/s |  TTFT p50 p90 p99 ms |  "
      "ITL p50 p90 p99 ms | e2e p99 | goodput | prefix hit |\n");
  nlohmann::json doc = {
      {"target", target},
      {"workload", workload},
      {"reference_prefix_cache_hit_rate",
       *reference_hit_rate >= 0 ? nlohmann::json(*reference_hit_rate) : nlohmann::json()},
      {"results", nlohmann::json::array()}};
  for (double level : levels) {
    if (absl::Status started = meter.Start(); !started.ok()) return fail(started);
    std::vector<std::vector<Outcome>> conversations(work.size());
    std::atomic<size_t> next{0};
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    if (!open_loop) {
      for (int c = 0; c < static_cast<int>(level); ++c) {
        threads.emplace_back([&] {
          for (size_t i; (i = next++) < work.size();) {
            conversations[i] = Converse(*stub, work[i], api_key, timeout_s);
          }
        });
      }
    } else {
      std::mt19937 gen(7);
      std::exponential_distribution<double> gap(level);
      auto at = start;
      for (size_t i = 0; i < work.size(); ++i) {
        at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(gen)));
        std::this_thread::sleep_until(at);
        threads.emplace_back(
            [&, i] { conversations[i] = Converse(*stub, work[i], api_key, timeout_s); });
      }
    }
    for (auto& t : threads) t.join();
    std::vector<Outcome> outcomes;
    for (auto& c : conversations) {
      for (Outcome& o : c) outcomes.push_back(std::move(o));
    }
    Summary s;
    s.mode = open_loop ? "open" : "closed";
    s.level = level;
    s.seconds = Seconds(Clock::now() - start);
    int64_t good = 0;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const Outcome& o = outcomes[i];
      ++s.requests;
      if (!o.ok) {
        ++s.failed;
        continue;
      }
      s.exact += o.ids == reference[i];
      s.tokens += static_cast<int64_t>(o.ids.size());
      s.ttft.push_back(o.ttft);
      s.e2e.push_back(o.e2e);
      s.itl.insert(s.itl.end(), o.gaps.begin(), o.gaps.end());
      good += o.ttft * 1e3 <= slo_ttft_ms && Percentile(o.gaps, 0.99) * 1e3 <= slo_itl_ms;
    }
    s.goodput = s.seconds > 0 ? good / s.seconds : 0;
    const absl::StatusOr<double> hit_rate = meter.Rate();
    if (!hit_rate.ok()) return fail(hit_rate.status());
    s.prefix_hit_rate = *hit_rate;
    PrintRow(s);
    doc["results"].push_back(ToJson(s));
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << doc.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "walsh-bench serve: cannot write %s\n", json_path.c_str());
      return 3;
    }
  }
  if (!plot_path.empty()) {
    if (plot_path.find_first_of("'\\\"") != std::string::npos) {
      std::fprintf(stderr, "walsh-bench serve: --plot: the path may not hold quotes\n");
      return 2;
    }
    return Plot(doc, open_loop, plot_path);
  }
  return 0;
}

}  // namespace walsh
