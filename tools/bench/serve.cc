// walsh-bench serve: streams Generate requests at a walsh endpoint and reports what clients
// see. Closed loop (a sweep of concurrency levels, each client sending its next request when
// the last one ends) or open loop (Poisson arrivals at given rates); workloads "fixed" (one
// prompt), "random" (prompts of random words and lengths) and "shared-prefix" (a long common
// system prefix and a short distinct tail). Every request has a fixed seed, so a reference
// pass (one stream at a time) gives the exact tokens each request must produce under load: the
// exactness column is the share of streams identical to it.
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

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli_flags.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh {
namespace {

using Clock = std::chrono::steady_clock;

struct Outcome {
  bool ok = false;
  std::string error;
  std::vector<int32_t> ids;
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

// The workload's requests, deterministic from the seed.
std::vector<v1::GenerateRequest> MakeRequests(const std::string& workload, int64_t n,
                                              int64_t max_tokens) {
  static const char* kWords[] = {"the",    "quick",    "brown",   "fox",    "jumps",  "over",
                                 "lazy",   "dog",      "model",   "token",  "stream", "gateway",
                                 "worker", "hadamard", "ternary", "bonsai", "walsh",  "rotation"};
  std::mt19937 gen(42);
  std::string prefix;
  for (int i = 0; i < 120; ++i) prefix += std::string(kWords[gen() % 18]) + " ";
  std::vector<v1::GenerateRequest> out;
  for (int64_t i = 0; i < n; ++i) {
    v1::GenerateRequest r;
    std::string text;
    if (workload == "fixed") {
      text = "Write a short note about ternary weights.";
    } else {
      const int words = workload == "shared-prefix" ? 8 : 4 + static_cast<int>(gen() % 60);
      for (int w = 0; w < words; ++w) text += std::string(kWords[gen() % 18]) + " ";
      if (workload == "shared-prefix") text = prefix + text;
    }
    r.set_text(text);
    r.mutable_sampling()->set_temperature(0.8f);
    r.mutable_sampling()->set_seed(1000 + static_cast<uint64_t>(i));
    r.mutable_stopping()->set_max_tokens(static_cast<uint32_t>(max_tokens));
    r.mutable_stopping()->set_ignore_eos(true);
    out.push_back(std::move(r));
  }
  return out;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1,
                    static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

struct Summary {
  std::string mode;
  double level = 0;  // concurrency or requests/s
  int64_t requests = 0, failed = 0, exact = 0, tokens = 0;
  double seconds = 0, goodput = 0;
  std::vector<double> ttft, itl, e2e;
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
          {"e2e", pct(s.e2e)}};
}

void PrintRow(const Summary& s) {
  std::printf(
      "| %-6s | %7.1f | %5lld | %4lld | %6.1f%% | %9.1f | %7.1f %7.1f %7.1f | %6.2f %6.2f "
      "%6.2f | %8.1f | %7.2f |\n",
      s.mode.c_str(), s.level, static_cast<long long>(s.requests), static_cast<long long>(s.failed),
      s.requests ? 100.0 * static_cast<double>(s.exact) / s.requests : 0.0,
      s.seconds > 0 ? s.tokens / s.seconds : 0.0, 1e3 * Percentile(s.ttft, 0.5),
      1e3 * Percentile(s.ttft, 0.9), 1e3 * Percentile(s.ttft, 0.99), 1e3 * Percentile(s.itl, 0.5),
      1e3 * Percentile(s.itl, 0.9), 1e3 * Percentile(s.itl, 0.99), 1e3 * Percentile(s.e2e, 0.99),
      s.goodput);
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
  int64_t requests = 32, max_tokens = 32;
  double slo_ttft_ms = 1000, slo_itl_ms = 200, timeout_s = 120;
  FlagSet flags(
      "walsh-bench serve --target HOST:PORT [--workload fixed|random|shared-prefix] "
      "[--concurrency 1,4,16 | --rates 2,8] [--requests N] [--max-tokens N] [--json FILE]");
  flags.String("target", &target, "a worker or the gateway");
  flags.String("workload", &workload, "fixed, random or shared-prefix");
  flags.String("concurrency", &concurrency, "closed-loop levels (clients), comma-separated");
  flags.String("rates", &rates, "open-loop Poisson rates (requests/s); replaces --concurrency");
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
  if ((workload != "fixed" && workload != "random" && workload != "shared-prefix") ||
      requests < 1 || max_tokens < 1) {
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
  const std::vector<v1::GenerateRequest> work = MakeRequests(workload, requests, max_tokens);

  // The reference: one stream at a time.
  std::vector<std::vector<int32_t>> reference(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    const Outcome o = Stream(*stub, work[i], api_key, timeout_s);
    if (!o.ok) {
      std::fprintf(stderr, "walsh-bench serve: reference request %zu failed: %s\n", i,
                   o.error.c_str());
      return 3;
    }
    reference[i] = o.ids;
  }
  std::printf(
      "target %s, workload %s, %lld requests of %lld tokens per level; SLO: TTFT %.0f ms, "
      "p99 inter-token %.0f ms\n",
      target.c_str(), workload.c_str(), static_cast<long long>(requests),
      static_cast<long long>(max_tokens), slo_ttft_ms, slo_itl_ms);
  std::printf(
      "| mode   |   level |  reqs | fail |   exact | output t/s |  TTFT p50 p90 p99 ms |  "
      "ITL p50 p90 p99 ms | e2e p99 | goodput |\n");
  nlohmann::json doc = {
      {"target", target}, {"workload", workload}, {"results", nlohmann::json::array()}};
  for (double level : levels) {
    std::vector<Outcome> outcomes(work.size());
    std::atomic<size_t> next{0};
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    if (!open_loop) {
      for (int c = 0; c < static_cast<int>(level); ++c) {
        threads.emplace_back([&] {
          for (size_t i; (i = next++) < work.size();) {
            outcomes[i] = Stream(*stub, work[i], api_key, timeout_s);
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
        threads.emplace_back([&, i] { outcomes[i] = Stream(*stub, work[i], api_key, timeout_s); });
      }
    }
    for (auto& t : threads) t.join();
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
