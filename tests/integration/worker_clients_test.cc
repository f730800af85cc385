// The worker from the outside: Prometheus (promtool and a real server), and clients in Python
// and Node that call Generate, health and reflection.
#include <fstream>
#include <thread>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/worker_fixture.h"

namespace walsh {
namespace {

using testing::RunProcess;
using testing::WorkerProcess;

const std::string kProtoRoot = std::string(WALSH_SOURCE_DIR) + "/proto";
const std::string kTestProtoRoot = std::string(WALSH_SOURCE_DIR) + "/tests/protos";

void GenerateSome(WorkerProcess& w) {
  v1::GenerateRequest r;
  r.set_text("metrics please");
  r.mutable_stopping()->set_max_tokens(16);
  r.mutable_stopping()->set_ignore_eos(true);
  ASSERT_TRUE(testing::RunGenerate(*w.Generator(), r).status.ok());
  // The stream ends before the step that finished it updates the gauges.
  testing::WaitForIdle(*w.Worker());
}

TEST(WorkerMetrics, PromtoolAcceptsTheExposition) {
  WorkerProcess w;
  ASSERT_TRUE(w.ok());
  GenerateSome(w);
  const std::string metrics = testing::HttpGet(w.metrics_port(), "/metrics");
  for (const char* name : {"walsh_worker_requests_total{finish_reason=\"length\"} 1",
                           "walsh_worker_generation_tokens_total 16",
                           "walsh_worker_prompt_tokens_total",
                           "walsh_worker_time_to_first_token_seconds_bucket",
                           "walsh_worker_inter_token_latency_seconds_count",
                           "walsh_worker_e2e_request_latency_seconds_sum",
                           "walsh_worker_queue_time_seconds_count",
                           "walsh_worker_step_duration_seconds_count",
                           "walsh_worker_batch_size_tokens_count",
                           "walsh_worker_preemptions_total",
                           "walsh_worker_kv_pages_used",
                           "walsh_worker_kv_pages_capacity",
                           "walsh_worker_weight_hugepage_bytes",
                           "walsh_worker_state_slots_used",
                           "walsh_worker_state_slots_capacity",
                           "walsh_worker_requests_running",
                           "walsh_worker_requests_waiting",
                           "vllm:num_requests_waiting 0",
                           "vllm:num_requests_running 0",
                           "vllm:kv_cache_usage_perc",
                           "vllm:prefix_cache_queries_total",
                           "vllm:prefix_cache_hits_total 0",
                           "vllm:spec_decode_num_drafts_total 0",
                           "vllm:spec_decode_num_draft_tokens_total 0",
                           "vllm:spec_decode_num_accepted_tokens_total 0",
                           "walsh_worker_prefix_cache_lookups_total{outcome=\"no_prefix\"} 1",
                           "walsh_worker_prefix_cache_evictions_total{kind=\"page\"} 0",
                           "walsh_worker_prefix_cache_bytes{kind=\"pages\"}",
                           "walsh_worker_prefix_cache_entries{kind=\"snapshots\"} 0",
                           "process_resident_memory_bytes",
                           "process_cpu_seconds_total",
                           "process_start_time_seconds",
                           "process_open_fds",
                           "walsh_build_info{",
                           "walsh_model_info{"}) {
    EXPECT_NE(metrics.find(name), std::string::npos) << name;
  }
  // The generation read the weights, so some are resident, as /proc/self/smaps counts them.
  const std::string resident = "\nwalsh_worker_weight_resident_bytes ";
  const size_t at = metrics.find(resident);
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(metrics.substr(at + resident.size())), 0.0);
  // promtool's linter reserves ':' for recording rules, so it flags vLLM's names by design; it
  // checks everything else, and the real Prometheus below ingests the vllm: series.
  std::string without_vllm;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (line.find("vllm:") == absl::string_view::npos && !line.empty()) {
      without_vllm.append(line.data(), line.size()).push_back('\n');
    }
  }
  const auto check = RunProcess({WALSH_PROMTOOL_BIN, "check", "metrics"}, without_vllm);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

TEST(WorkerMetrics, ARealPrometheusScrapesTheWorker) {
  WorkerProcess w;
  ASSERT_TRUE(w.ok());
  GenerateSome(w);
  testing::TempDir dir;
  const int port = testing::FreePort();
  {
    std::ofstream cfg(dir.File("prometheus.yml"));
    cfg << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "scrape_configs:\n  - job_name: walsh-worker\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << w.metrics_port() << "']\n";
  }
  testing::ChildProcess prom({WALSH_PROMETHEUS_BIN, "--config.file=" + dir.File("prometheus.yml"),
                              "--storage.tsdb.path=" + dir.File("data"),
                              "--web.listen-address=127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(prom.started());
  auto query = [&](const std::string& q) -> nlohmann::json {
    const std::string body = testing::HttpGet(port, "/api/v1/query?query=" + q);
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success") return nlohmann::json::array();
    return j["data"]["result"];
  };
  // A fresh server needs a few seconds before its first scrape: poll, bounded.
  bool up = false, tokens = false, vllm = false;
  for (int i = 0; i < 120 && !(up && tokens && vllm); ++i) {
    (void)prom.WaitForStderrLine([](const std::string&) { return false; },
                                 std::chrono::milliseconds(250));
    const nlohmann::json u = query("up");
    up = !u.empty() && u[0]["value"][1] == "1";
    const nlohmann::json t = query("walsh_worker_generation_tokens_total");
    tokens = !t.empty() && std::stod(t[0]["value"][1].get<std::string>()) > 0;
    vllm = !query("vllm:num_requests_running").empty();
  }
  EXPECT_TRUE(up);
  EXPECT_TRUE(tokens);
  EXPECT_TRUE(vllm);
}

TEST(WorkerClients, PythonClient) {
  WorkerProcess w;
  ASSERT_TRUE(w.ok());
  const auto r =
      RunProcess({WALSH_PYTHON_BIN, std::string(WALSH_SOURCE_DIR) + "/tests/python/grpc_client.py",
                  w.target(), kProtoRoot, kTestProtoRoot});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"].size(), 8u);
  EXPECT_EQ(j["finish"], "length");
  EXPECT_EQ(j["health"], "SERVING");
  EXPECT_EQ(j["tokenize"], j["started_prompt_ids"]);
  EXPECT_EQ(j["prompt_tokens"], j["tokenize"].size());
  EXPECT_NE(j["bad"].get<std::string>().find("INVALID_ARGUMENT sampling.top_p"), std::string::npos)
      << j["bad"];
  const auto services = j["services"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(services.begin(), services.end(), "walsh.v1.Generator"), services.end());
  EXPECT_NE(std::find(services.begin(), services.end(), "grpc.health.v1.Health"), services.end());
  // The same greedy request from C++ gives the same tokens.
  v1::GenerateRequest req;
  req.set_text("Hello from Python");
  req.mutable_sampling()->set_temperature(0);
  req.mutable_stopping()->set_max_tokens(8);
  req.mutable_stopping()->set_ignore_eos(true);
  EXPECT_EQ(testing::RunGenerate(*w.Generator(), req).ids, j["ids"].get<std::vector<int32_t>>());
}

TEST(WorkerClients, NodeClient) {
  WorkerProcess w;
  ASSERT_TRUE(w.ok());
  const auto r =
      RunProcess({WALSH_NODE_BIN, std::string(WALSH_SOURCE_DIR) + "/tests/node/grpc_client.mjs",
                  w.target(), kProtoRoot, kTestProtoRoot});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"].size(), 8u);
  EXPECT_EQ(j["finish"], "length");
  EXPECT_EQ(j["health"], "SERVING");
  EXPECT_NE(j["bad"].get<std::string>().find("stopping.max_tokens"), std::string::npos) << j["bad"];
  const auto services = j["services"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(services.begin(), services.end(), "walsh.v1.Worker"), services.end());
}

// walsh-bench serve against a real worker: every stream under load identical to its reference,
// the JSON report and the sweep's PNG written.
TEST(WorkerClients, ServeBenchStreamsExactlyAndReports) {
  WorkerProcess w;
  ASSERT_TRUE(w.ok());
  testing::TempDir dir;
  const auto r =
      RunProcess({WALSH_BENCH_BIN, "serve", "--target", w.target(), "--workload", "shared-prefix",
                  "--concurrency", "1,3", "--requests", "6", "--max-tokens", "8", "--json",
                  dir.File("serve.json"), "--plot", dir.File("serve.png")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(testing::ReadFileOrDie(dir.File("serve.json")));
  ASSERT_EQ(doc["results"].size(), 2u);
  for (const auto& level : doc["results"]) {
    EXPECT_EQ(level["failed"], 0);
    EXPECT_EQ(level["exact_fraction"], 1.0);
    EXPECT_GT(level["output_tokens_per_s"].get<double>(), 0.0);
  }
  const std::string png = testing::ReadFileOrDie(dir.File("serve.png"));
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
}

// The speculative benchmarks: the code-edit and summarize workloads against a worker that
// drafts, every stream exact; and walsh-bench decode's oracle rows (sdK), whose drafts the
// engine must accept every one of (it fails otherwise).
TEST(WorkerClients, SpeculativeBenchmarksRun) {
  WorkerProcess w({"--speculative", "ngram"});
  ASSERT_TRUE(w.ok());
  testing::TempDir dir;
  for (const char* workload : {"code-edit", "summarize"}) {
    const auto r = RunProcess({WALSH_BENCH_BIN, "serve", "--target", w.target(), "--workload",
                               workload, "--concurrency", "1,2", "--requests", "2", "--max-tokens",
                               "12", "--json", dir.File("serve.json")});
    ASSERT_EQ(r.exit_code, 0) << workload << ": " << r.err;
    const nlohmann::json doc =
        nlohmann::json::parse(testing::ReadFileOrDie(dir.File("serve.json")));
    for (const auto& level : doc["results"]) EXPECT_EQ(level["exact_fraction"], 1.0) << workload;
  }
  const auto d = RunProcess({WALSH_BENCH_BIN, "decode", "--model", testing::TinyModelPath(),
                             "--prompt", "16", "--gen", "12", "--batch", "1,3", "--speculate", "2",
                             "--no-bandwidth", "--json", dir.File("decode.json")});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const nlohmann::json doc = nlohmann::json::parse(testing::ReadFileOrDie(dir.File("decode.json")));
  int sd_rows = 0;
  for (const auto& t : doc["tests"]) sd_rows += t["test"] == "sd2" ? 1 : 0;
  EXPECT_EQ(sd_rows, 2);
}

}  // namespace
}  // namespace walsh
