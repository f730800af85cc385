// walsh-worker as clients see it, on loopback with ephemeral ports: a WorkerServer in this process
// (InProcessWorker) unless the process is the point (signals, logs, exit codes, faults: a real
// walsh-worker process, WorkerProcess).
#include <signal.h>

#include <atomic>
#include <future>
#include <random>
#include <thread>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/field_error.h"
#include "common/grpc_status.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/gateway_fixture.h"
#include "tests/integration/in_process_worker.h"
#include "tests/integration/worker_fixture.h"
#include "tests/util/eventually.h"
#include "tools/mkmodel/synthetic_model.h"

namespace walsh {
namespace {

using testing::InProcessWorker;
using testing::MetricIn;
using testing::RunGenerate;
using testing::StreamResult;
using testing::WorkerProcess;

v1::GenerateRequest Request(const std::string& text, uint32_t max_tokens,
                            std::optional<float> temperature, std::optional<uint64_t> seed) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  if (temperature) r.mutable_sampling()->set_temperature(*temperature);
  if (seed) r.mutable_sampling()->set_seed(*seed);
  return r;
}

TEST(WorkerService, ConcurrentStreamsEqualTheirSoloRuns) {
  InProcessWorker w({"--threads", "2", "--max-batch-tokens", "64"});
  ASSERT_TRUE(w.ok());
  auto stub = w.Generator();
  std::vector<v1::GenerateRequest> reqs;
  for (int i = 0; i < 16; ++i) {
    const std::string prompt =
        "request " + std::to_string(i) + (i % 3 ? " with a longer prompt about foxes" : "");
    reqs.push_back(i % 2 ? Request(prompt, 24, 0.0f, std::nullopt)
                         : Request(prompt, 24, 0.9f, 1000 + i));
  }
  std::vector<StreamResult> solo;
  for (const auto& r : reqs) {
    solo.push_back(RunGenerate(*stub, r));
    ASSERT_TRUE(solo.back().status.ok()) << solo.back().status.error_message();
    ASSERT_EQ(solo.back().ids.size(), 24u);
  }
  std::vector<StreamResult> together(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i) {
    threads.emplace_back([&, i] { together[i] = RunGenerate(*stub, reqs[i]); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(together[i].status.ok()) << together[i].status.error_message();
    EXPECT_EQ(together[i].ids, solo[i].ids) << "request " << i;
    EXPECT_EQ(together[i].text, solo[i].text) << "request " << i;
    EXPECT_EQ(together[i].finish_reason, "length");
  }
}

TEST(WorkerService, CancelledStreamsFreeTheirPagesAndSlots) {
  InProcessWorker w({"--max-running", "8"});
  ASSERT_TRUE(w.ok());
  auto stub = w.Generator();
  std::mt19937 gen(3);
  std::atomic<int> cancelled{0};
  for (int wave = 0; wave < 5; ++wave) {
    std::vector<std::thread> threads;
    for (int i = 0; i < 20; ++i) {
      const int cancel_after = static_cast<int>(gen() % 12);
      threads.emplace_back([&, cancel_after, i] {
        grpc::ClientContext ctx;
        auto reader = stub->Generate(
            &ctx, Request("cancel me " + std::to_string(i), 400, 0.0f, std::nullopt));
        v1::GenerateResponse resp;
        int tokens = 0;
        while (reader->Read(&resp)) {
          if (resp.has_tokens() && ++tokens >= cancel_after) break;
        }
        ctx.TryCancel();
        const grpc::Status s = reader->Finish();
        if (s.error_code() == grpc::StatusCode::CANCELLED) ++cancelled;
      });
    }
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(cancelled.load(), 100);
  const v1::Load load = testing::WaitForIdle(*w.Worker());
  EXPECT_EQ(load.kv_pages_used(), 0u);
  EXPECT_EQ(load.state_slots_used(), 0u);
  EXPECT_EQ(load.running(), 0u);
  // Nothing keeps generating: the token counter stands still.
  const std::string before = testing::HttpGet(w.metrics_port(), "/metrics");
  // Nothing to wait for: the check is that nothing happens in this window.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto tokens = [](const std::string& m) {
    const size_t at = m.find("\nwalsh_worker_generation_tokens_total ");
    return at == std::string::npos ? std::string() : m.substr(at, m.find('\n', at + 1) - at);
  };
  EXPECT_EQ(tokens(before), tokens(testing::HttpGet(w.metrics_port(), "/metrics")));
}

struct BadCase {
  const char* what;
  std::function<void(v1::GenerateRequest&)> mutate;
  grpc::StatusCode code;
  const char* field;
};

TEST(WorkerService, InvalidRequestsNameTheField) {
  InProcessWorker w({"--max-tokens", "100", "--max-context", "200"});
  ASSERT_TRUE(w.ok());
  auto stub = w.Generator();
  const std::vector<BadCase> cases = {
      {"no input", [](v1::GenerateRequest& r) { r.clear_text(); },
       grpc::StatusCode::INVALID_ARGUMENT, "input"},
      {"empty text", [](v1::GenerateRequest& r) { r.set_text(""); },
       grpc::StatusCode::INVALID_ARGUMENT, "text"},
      {"token out of range",
       [](v1::GenerateRequest& r) {
         r.mutable_tokens()->add_ids(5);
         r.mutable_tokens()->add_ids(100000);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "tokens.ids[1]"},
      {"negative token", [](v1::GenerateRequest& r) { r.mutable_tokens()->add_ids(-1); },
       grpc::StatusCode::INVALID_ARGUMENT, "tokens.ids[0]"},
      {"empty chat", [](v1::GenerateRequest& r) { r.mutable_chat(); },
       grpc::StatusCode::INVALID_ARGUMENT, "chat.messages"},
      {"bad role",
       [](v1::GenerateRequest& r) {
         auto* m = r.mutable_chat()->add_messages();
         m->set_role("robot");
         m->set_content("x");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "chat.messages[0].role"},
      {"temperature", [](v1::GenerateRequest& r) { r.mutable_sampling()->set_temperature(-1); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.temperature"},
      {"top_p zero", [](v1::GenerateRequest& r) { r.mutable_sampling()->set_top_p(0); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_p"},
      {"top_p big", [](v1::GenerateRequest& r) { r.mutable_sampling()->set_top_p(1.5f); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_p"},
      {"top_k", [](v1::GenerateRequest& r) { r.mutable_sampling()->set_top_k(-3); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_k"},
      {"min_p", [](v1::GenerateRequest& r) { r.mutable_sampling()->set_min_p(2); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.min_p"},
      {"repetition",
       [](v1::GenerateRequest& r) { r.mutable_sampling()->set_repetition_penalty(0); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.repetition_penalty"},
      {"presence", [](v1::GenerateRequest& r) { r.mutable_sampling()->set_presence_penalty(3); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.presence_penalty"},
      {"frequency", [](v1::GenerateRequest& r) { r.mutable_sampling()->set_frequency_penalty(-3); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.frequency_penalty"},
      {"bias id",
       [](v1::GenerateRequest& r) { (*r.mutable_sampling()->mutable_logit_bias())[99999] = 1; },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.logit_bias"},
      {"bias value",
       [](v1::GenerateRequest& r) { (*r.mutable_sampling()->mutable_logit_bias())[3] = 500; },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.logit_bias[3]"},
      {"max_tokens zero", [](v1::GenerateRequest& r) { r.mutable_stopping()->set_max_tokens(0); },
       grpc::StatusCode::INVALID_ARGUMENT, "stopping.max_tokens"},
      {"max_tokens over limit",
       [](v1::GenerateRequest& r) { r.mutable_stopping()->set_max_tokens(101); },
       grpc::StatusCode::INVALID_ARGUMENT, "stopping.max_tokens"},
      {"empty stop", [](v1::GenerateRequest& r) { r.mutable_stopping()->add_stop(""); },
       grpc::StatusCode::INVALID_ARGUMENT, "stopping.stop[0]"},
      {"too many stops",
       [](v1::GenerateRequest& r) {
         for (int i = 0; i < 17; ++i) r.mutable_stopping()->add_stop("x");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "stopping.stop"},
      {"stop id", [](v1::GenerateRequest& r) { r.mutable_stopping()->add_stop_token_ids(100000); },
       grpc::StatusCode::INVALID_ARGUMENT, "stopping.stop_token_ids[0]"},
      {"logprobs", [](v1::GenerateRequest& r) { r.set_logprobs(21); },
       grpc::StatusCode::INVALID_ARGUMENT, "logprobs"},
      {"request id", [](v1::GenerateRequest& r) { r.set_request_id(std::string(200, 'x')); },
       grpc::StatusCode::INVALID_ARGUMENT, "request_id"},
      {"prompt too long",
       [](v1::GenerateRequest& r) {
         for (int i = 0; i < 250; ++i) r.mutable_tokens()->add_ids(7);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "prompt"},
      {"prompt + max_tokens too long",
       [](v1::GenerateRequest& r) {
         for (int i = 0; i < 150; ++i) r.mutable_tokens()->add_ids(7);
         r.mutable_stopping()->set_max_tokens(100);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "stopping.max_tokens"},
  };
  for (const BadCase& c : cases) {
    v1::GenerateRequest r;
    r.set_text("hello");
    c.mutate(r);
    const StreamResult res = RunGenerate(*stub, r);
    EXPECT_EQ(res.status.error_code(), c.code) << c.what << ": " << res.status.error_message();
    EXPECT_NE(res.status.error_message().find(c.field), std::string::npos)
        << c.what << ": \"" << res.status.error_message() << "\" does not name "
        << c.field;  // The field crosses the wire as the status's payload, not only in its message.
    EXPECT_EQ(FieldOf(FromGrpcStatus(res.status)).rfind(c.field, 0), 0u)
        << c.what << ": the payload names '" << FieldOf(FromGrpcStatus(res.status)) << "'";
  }
  // Detokenize checks its ids too.
  grpc::ClientContext ctx;
  v1::DetokenizeRequest d;
  d.add_ids(100000);
  v1::DetokenizeResponse dr;
  const grpc::Status ds = stub->Detokenize(&ctx, d, &dr);
  EXPECT_EQ(ds.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(ds.error_message().find("ids[0]"), std::string::npos);
}

TEST(WorkerService, AFloodBeyondTheQueueGetsResourceExhausted) {
  InProcessWorker w({"--max-running", "1", "--max-queue", "2"});
  ASSERT_TRUE(w.ok());
  auto stub = w.Generator();
  std::atomic<int> ok{0}, exhausted{0}, other{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 40; ++i) {
    threads.emplace_back([&, i] {
      const StreamResult r =
          RunGenerate(*stub, Request("flood " + std::to_string(i), 30, 0.0f, std::nullopt));
      if (r.status.ok())
        ++ok;
      else if (r.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
        ++exhausted;
      else
        ++other;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(exhausted.load(), 0);
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(other.load(), 0);
  // Still alive and serving.
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckResponse h;
  ASSERT_TRUE(w.Health()->Check(&ctx, {}, &h).ok());
  EXPECT_EQ(h.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST(WorkerService, ModelInfoTokenizeResumeAndStops) {
  InProcessWorker w;
  ASSERT_TRUE(w.ok());
  auto stub = w.Generator();
  grpc::ClientContext ictx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&ictx, {}, &info).ok());
  EXPECT_EQ(info.architecture(), "qwen35");
  EXPECT_EQ(info.weight_format(), "PQ2_0");
  EXPECT_EQ(info.vocab_size(), 768u);
  EXPECT_EQ(info.contract_fingerprint().size(), 64u);
  EXPECT_EQ(info.kv_cache_dtype(), "fp16");
  EXPECT_GT(info.kv_bytes_per_token(), 0u);
  EXPECT_EQ(info.kv_token_capacity() % info.kv_page_size(), 0u);
  // --weights-memory auto: a copy in huge pages or the mapped file, and the share measured.
  EXPECT_TRUE(info.weights_memory() == "hugepages" || info.weights_memory() == "mmap")
      << info.weights_memory();
  EXPECT_GT(info.weight_bytes(), 0u);
  EXPECT_LE(info.weight_hugepage_bytes(), info.weight_bytes());
  // A second worker on the same file proves the same fingerprint.
  InProcessWorker w2;
  ASSERT_TRUE(w2.ok());
  grpc::ClientContext ictx2;
  v1::ModelInfo info2;
  ASSERT_TRUE(w2.Generator()->GetModelInfo(&ictx2, {}, &info2).ok());
  EXPECT_EQ(info.contract_fingerprint(), info2.contract_fingerprint());
  {
    // So does one that stores its KV pages in q8, and it reports q8's bytes (34 per 32 values
    // against fp16's 64) in ModelInfo and in its metrics.
    InProcessWorker q8({"--kv-cache-dtype", "q8"});
    ASSERT_TRUE(q8.ok());
    grpc::ClientContext qctx;
    v1::ModelInfo qinfo;
    ASSERT_TRUE(q8.Generator()->GetModelInfo(&qctx, {}, &qinfo).ok());
    EXPECT_EQ(info.contract_fingerprint(), qinfo.contract_fingerprint());
    EXPECT_EQ(qinfo.kv_cache_dtype(), "q8");
    EXPECT_EQ(qinfo.kv_bytes_per_token(), info.kv_bytes_per_token() * 34 / 64);
    const std::string metrics = testing::HttpGet(q8.metrics_port(), "/metrics");
    EXPECT_NE(metrics.find("walsh_worker_kv_bytes_per_token{dtype=\"q8\"} " +
                           std::to_string(qinfo.kv_bytes_per_token())),
              std::string::npos);
    // vLLM's cache_config_info, as the Gateway API Inference Extension reads it.
    const std::string cache_config =
        "vllm:cache_config_info{block_size=\"" + std::to_string(qinfo.kv_page_size()) +
        "\",num_gpu_blocks=\"" + std::to_string(qinfo.kv_token_capacity() / qinfo.kv_page_size()) +
        "\",cache_dtype=\"q8\",";
    EXPECT_NE(metrics.find(cache_config), std::string::npos) << metrics;
  }

  grpc::ClientContext tctx;
  v1::TokenizeRequest tr;
  tr.set_text("The quick brown fox");
  v1::TokenizeResponse tok;
  ASSERT_TRUE(stub->Tokenize(&tctx, tr, &tok).ok());
  grpc::ClientContext dctx;
  v1::DetokenizeRequest dr;
  *dr.mutable_ids() = tok.ids();
  v1::DetokenizeResponse text;
  ASSERT_TRUE(stub->Detokenize(&dctx, dr, &text).ok());
  EXPECT_EQ(text.text(), "The quick brown fox");
  // Every token alone detokenizes to well-formed UTF-8 (a proto3 string), byte tokens too.
  int replaced = 0;
  for (int32_t id = 0; id < 512; ++id) {
    grpc::ClientContext ictx;
    v1::DetokenizeRequest one;
    one.add_ids(id);
    v1::DetokenizeResponse piece;
    ASSERT_TRUE(stub->Detokenize(&ictx, one, &piece).ok());
    EXPECT_TRUE(testing::WellFormedUtf8(piece.text())) << "id " << id;
    replaced += piece.text().find("\xEF\xBF\xBD") != std::string::npos;
  }
  EXPECT_GE(replaced, 64);  // the lone bytes 0x80-0xFF among them

  // Resume on the second worker at index k gives the rest of the same stream.
  const v1::GenerateRequest req = Request("resume from here", 20, 0.8f, 77);
  const StreamResult full = RunGenerate(*stub, req);
  ASSERT_TRUE(full.status.ok());
  for (size_t k : {size_t{0}, size_t{1}, size_t{7}, size_t{19}}) {
    v1::ResumeRequest rr;
    *rr.mutable_request() = req;
    *rr.mutable_prompt_ids() = tok.ids();
    rr.mutable_prompt_ids()->Clear();
    grpc::ClientContext c2;
    v1::TokenizeRequest t2;
    t2.set_text("resume from here");
    v1::TokenizeResponse p2;
    ASSERT_TRUE(w2.Generator()->Tokenize(&c2, t2, &p2).ok());
    *rr.mutable_prompt_ids() = p2.ids();
    for (size_t i = 0; i < k; ++i) rr.add_emitted_ids(full.ids[i]);
    grpc::ClientContext rctx;
    auto reader = w2.Worker()->Resume(&rctx, rr);
    v1::GenerateResponse resp;
    std::vector<int32_t> rest;
    uint64_t first_index = 0;
    bool first = true;
    while (reader->Read(&resp)) {
      for (const auto& t : resp.tokens().tokens()) {
        if (first) first_index = t.index(), first = false;
        rest.push_back(t.id());
      }
    }
    const grpc::Status resumed = reader->Finish();
    ASSERT_TRUE(resumed.ok()) << "resume at " << k << ": " << resumed.error_message();
    EXPECT_EQ(first_index, k);
    EXPECT_EQ(rest, std::vector<int32_t>(full.ids.begin() + k, full.ids.end()))
        << "resume at " << k;
  }

  // A stop string ends the stream without being sent: stop at the text of a later token.
  size_t offset = 0;
  std::string stop;
  for (size_t i = 0; i < full.pieces.size(); offset += full.pieces[i].size(), ++i) {
    if (i >= 2 && !full.pieces[i].empty() && full.text.find(full.pieces[i]) == offset) {
      stop = full.pieces[i];
      break;
    }
  }
  ASSERT_FALSE(stop.empty()) << "no usable stop string in " << full.text;
  v1::GenerateRequest sr = req;
  sr.mutable_stopping()->add_stop(stop);
  const StreamResult stopped = RunGenerate(*stub, sr);
  ASSERT_TRUE(stopped.status.ok()) << stopped.status.error_message();
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.text, full.text.substr(0, offset));
}

TEST(WorkerService, PreemptionByRecomputeKeepsStreamsExact) {
  // 1 MB of KV cache is 128 pages of 16 fp16 positions for the tiny model: eight 400-token
  // streams need about 1.6 times that, so some are preempted mid-flight and recomputed.
  InProcessWorker w({"--kv-cache-mb", "1", "--max-running", "8", "--max-batch-tokens", "256"});
  ASSERT_TRUE(w.ok());
  auto stub = w.Generator();
  std::vector<v1::GenerateRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    reqs.push_back(Request("preempt " + std::to_string(i), 400, i % 2 ? 0.0f : 0.8f, 500 + i));
  }
  std::vector<StreamResult> together(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i) {
    threads.emplace_back([&, i] { together[i] = RunGenerate(*stub, reqs[i]); });
  }
  for (auto& t : threads) t.join();
  const std::string metrics = testing::HttpGet(w.metrics_port(), "/metrics");
  const size_t at = metrics.find("\nwalsh_worker_preemptions_total ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(metrics.substr(at + 32)), 0) << "no preemption happened";
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(together[i].status.ok()) << together[i].status.error_message();
    const StreamResult solo = RunGenerate(*stub, reqs[i]);
    EXPECT_EQ(together[i].ids, solo.ids) << "request " << i;
  }
}

// Through the real binary: a worker with --speculative ngram streams the same tokens and text
// as a plain one, greedy and seeded, with stop strings and max_tokens, alone and concurrently,
// while drafts are verified, accepted and rejected.
// Both drafters, n-gram and a draft model (the target itself, on one rank or beside two), batched
// with greedy and seeded requests: every stream is the plain one, stop strings inside an accepted
// run included.
TEST(WorkerService, SpeculativeDecodingStreamsThePlainTokens) {
  InProcessWorker plain;
  ASSERT_TRUE(plain.ok());
  std::vector<v1::GenerateRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    const std::string line = "the quick brown fox " + std::to_string(i) + " jumps; ";
    reqs.push_back(Request(line + line + line, 24 + i, i % 2 ? 0.0f : 0.8f, 40 + i));
  }
  std::vector<StreamResult> want;
  for (const auto& r : reqs) want.push_back(RunGenerate(*plain.Generator(), r));
  // A stop string that occurs mid-stream ends both at the same place.
  for (size_t i = 0; i < 2; ++i) {
    if (want[i].pieces.size() > 6 && !want[i].pieces[5].empty()) {
      reqs.push_back(reqs[i]);
      reqs.back().mutable_stopping()->add_stop(want[i].pieces[5]);
      want.push_back(RunGenerate(*plain.Generator(), reqs.back()));
    }
  }
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--speculative", "ngram"},
        std::vector<std::string>{"--speculative", "draft:" + testing::TinyModelPath()},
        std::vector<std::string>{"--speculative", "draft:" + testing::TinyModelPath(), "--tp",
                                 "2"}}) {
    SCOPED_TRACE(absl::StrJoin(flags, " "));
    std::vector<std::string> args = flags;
    args.insert(args.end(), {"--num-speculative-tokens", "4"});
    InProcessWorker speculative(args);
    ASSERT_TRUE(speculative.ok());
    std::vector<StreamResult> got(reqs.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < reqs.size(); ++i) {
      threads.emplace_back([&, i] { got[i] = RunGenerate(*speculative.Generator(), reqs[i]); });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
      EXPECT_EQ(got[i].ids, want[i].ids) << "request " << i;
      EXPECT_EQ(got[i].text, want[i].text) << "request " << i;
      EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << "request " << i;
    }
    const std::string m = testing::HttpGet(speculative.metrics_port(), "/metrics");
    const double drafted = MetricIn(m, "vllm:spec_decode_num_draft_tokens_total").value_or(-1);
    const double accepted = MetricIn(m, "vllm:spec_decode_num_accepted_tokens_total").value_or(-1);
    EXPECT_GT(accepted, 0);
    EXPECT_LT(accepted, drafted);
    const v1::Load load = testing::WaitForIdle(*speculative.Worker());
    EXPECT_EQ(load.state_slots_used(), 0u);
    EXPECT_EQ(load.kv_pages_used(), 0u);
  }
}

// A stream migrates from a plain worker to one that speculates with a draft model (Resume at
// any index) and goes on exactly as it would have; a request that asks for no drafts gets none.
TEST(WorkerService, SpeculationResumesAMigratedStreamExactly) {
  InProcessWorker plain;
  InProcessWorker speculative({"--speculative", "draft:" + testing::TinyModelPath()});
  ASSERT_TRUE(plain.ok() && speculative.ok());
  const std::string text = "migrate me, migrate me, migrate me";
  const v1::GenerateRequest req = Request(text, 24, 0.0f, std::nullopt);
  const StreamResult full = RunGenerate(*plain.Generator(), req);
  ASSERT_TRUE(full.status.ok());
  v1::GenerateRequest none = req;
  none.set_num_speculative_tokens(0);
  EXPECT_EQ(RunGenerate(*speculative.Generator(), none).ids, full.ids);
  EXPECT_EQ(MetricIn(testing::HttpGet(speculative.metrics_port(), "/metrics"),
                     "vllm:spec_decode_num_drafts_total")
                .value_or(-1),
            0);
  grpc::ClientContext tctx;
  v1::TokenizeRequest tr;
  tr.set_text(text);
  v1::TokenizeResponse prompt;
  ASSERT_TRUE(speculative.Generator()->Tokenize(&tctx, tr, &prompt).ok());
  for (size_t k : {size_t{0}, size_t{5}, size_t{13}}) {
    v1::ResumeRequest rr;
    *rr.mutable_request() = req;
    *rr.mutable_prompt_ids() = prompt.ids();
    for (size_t i = 0; i < k; ++i) rr.add_emitted_ids(full.ids[i]);
    grpc::ClientContext rctx;
    auto reader = speculative.Worker()->Resume(&rctx, rr);
    v1::GenerateResponse resp;
    std::vector<int32_t> rest;
    while (reader->Read(&resp)) {
      for (const auto& t : resp.tokens().tokens()) rest.push_back(t.id());
    }
    ASSERT_TRUE(reader->Finish().ok()) << "resume at " << k;
    EXPECT_EQ(rest, std::vector<int32_t>(full.ids.begin() + k, full.ids.end())) << "at " << k;
  }
  EXPECT_GT(MetricIn(testing::HttpGet(speculative.metrics_port(), "/metrics"),
                     "vllm:spec_decode_num_accepted_tokens_total")
                .value_or(-1),
            0);
}

// A draft model whose vocabulary is not the target's stops the worker at load, naming the
// token that differs.
TEST(WorkerService, ADraftModelWithAnotherVocabularyIsRefused) {
  auto other = SyntheticModel::Create({});
  ASSERT_TRUE(other.ok());
  std::vector<std::string> tokens;
  for (const auto& [key, value] : (*other)->writer().kvs()) {
    if (key == "tokenizer.ggml.tokens") {
      for (const GgufValue& e : value.elems()) tokens.push_back(e.str());
    }
  }
  ASSERT_GT(tokens.size(), 300u);
  tokens[300] = "walsh";
  (*other)->mutable_writer().SetKv("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  testing::TempDir dir;
  ASSERT_TRUE((*other)->WritePacked(dir.File("other.gguf")).ok());
  WorkerProcess w({"--speculative", "draft:" + dir.File("other.gguf")});
  EXPECT_FALSE(w.ok());
  w.process().Wait(std::chrono::seconds(10));
  const std::string err = w.process().stderr_text();
  EXPECT_NE(err.find("tokenizer.ggml.tokens"), std::string::npos) << err;
  EXPECT_NE(err.find("token 300 is 'walsh' in the draft"), std::string::npos) << err;
}

TEST(WorkerService, SpeculativeFlagsAreCheckedAtStart) {
  // Each bad start exits (no signal, no crash) with a message naming what it refused.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--speculative", "medusa"}, "--speculative must be off, ngram or draft:FILE, not 'medusa'"},
      {{"--speculative", "ngram", "--num-speculative-tokens", "0"},
       "--num-speculative-tokens must be 1..16 (got 0)"},
      {{"--speculative", "draft:"}, "not 'draft:'"},
      {{"--speculative", "draft:/no/such/file.gguf"},
       "--speculative draft:/no/such/file.gguf: cannot open /no/such/file.gguf"},
      {{"--speculative", "ngram", "--speculative-min-acceptance", "2"},
       "--speculative-min-acceptance must be 0..1 (got 2)"},
      {{"--speculative", "ngram", "--speculative-ngram-min", "3", "--speculative-ngram-max", "2"},
       "maximum match (2) is below its minimum (3)"}};
  for (const auto& [args, named] : cases) {
    WorkerProcess w(args);
    EXPECT_FALSE(w.ok()) << args[1];
    const int code = w.process().Wait(std::chrono::seconds(10));
    EXPECT_GT(code, 0) << args[1] << " " << args.back();
    EXPECT_NE(w.process().stderr_text().find(named), std::string::npos)
        << named << " not in: " << w.process().stderr_text();
  }
}

TEST(WorkerService, TensorParallelWorkerServesTheSameTokens) {
  InProcessWorker one;
  InProcessWorker four({"--tp", "4"});
  ASSERT_TRUE(one.ok() && four.ok());
  for (int i = 0; i < 4; ++i) {
    const v1::GenerateRequest r =
        Request("tensor parallel " + std::to_string(i), 20, i % 2 ? 0.0f : 0.7f, 7 + i);
    const StreamResult a = RunGenerate(*one.Generator(), r);
    const StreamResult b = RunGenerate(*four.Generator(), r);
    ASSERT_TRUE(a.status.ok() && b.status.ok()) << b.status.error_message();
    EXPECT_EQ(a.ids, b.ids);
  }
  // Each rank holds its heads' share of the KV cache and state. Tiny has 2 KV heads and 2 GDN
  // key heads for 4 ranks, so pairs of ranks share each: a rank holds half the KV, and of a
  // GDN layer's per-sequence state (3 conv taps x 512 channels + 4 heads x 64 x 64) its 1 value
  // head's recurrent state and 192 conv channels (q and k of its key head, v of its value head):
  // 3 x 192 + 64 x 64 = 4672 of 17920 floats.
  auto gauge = [](const std::string& m, const std::string& series) {
    const size_t at = m.find(series + " ");
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + series.size() + 1));
  };
  const std::string m1 = testing::HttpGet(one.metrics_port(), "/metrics");
  const std::string m4 = testing::HttpGet(four.metrics_port(), "/metrics");
  const double kv1 = gauge(m1, "walsh_worker_rank_cache_bytes{rank=\"0\",kind=\"kv_cache\"}");
  const double st1 = gauge(m1, "walsh_worker_rank_cache_bytes{rank=\"0\",kind=\"state\"}");
  for (int r = 0; r < 4; ++r) {
    const std::string rank = "rank=\"" + std::to_string(r) + "\"";
    EXPECT_EQ(gauge(m4, "walsh_worker_rank_cache_bytes{" + rank + ",kind=\"kv_cache\"}"), kv1 / 2);
    EXPECT_EQ(gauge(m4, "walsh_worker_rank_cache_bytes{" + rank + ",kind=\"state\"}"),
              st1 * 4672 / 17920);
  }
  EXPECT_GT(kv1, 0);
}

// Polls the worker's health until it says NOT_SERVING or `within` has passed; whether it did.
bool NotServingWithin(WorkerProcess& w, std::chrono::milliseconds within) {
  return testing::Eventually(
      [&] {
        grpc::ClientContext ctx;
        grpc::health::v1::HealthCheckResponse h;
        return w.Health()->Check(&ctx, {}, &h).ok() &&
               h.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING;
      },
      within, std::chrono::milliseconds(20));
}

TEST(WorkerService, AStalledRankTurnsTheWorkerNotServing) {
  WorkerProcess w(WALSH_WORKER_FAULTS_BIN,
                  {"--tp", "2", "--debug-stall-rank", "1", "--collective-timeout-ms", "300"});
  ASSERT_TRUE(w.ok()) << w.process().stderr_text();
  grpc::Status failed = grpc::Status::OK;
  for (int i = 0; i < 50 && failed.ok(); ++i) {
    failed =
        RunGenerate(*w.Generator(), Request("stall " + std::to_string(i), 30, 0.0f, std::nullopt))
            .status;
  }
  EXPECT_FALSE(failed.ok());
  EXPECT_TRUE(NotServingWithin(w, std::chrono::seconds(2)));
}

// A step that runs past --step-stall-seconds turns health NOT_SERVING while it runs (here a rank
// stalls for the 3 s of its collective timeout), before the collective gives up.
TEST(WorkerService, AStepPastTheStallBoundTurnsHealthNotServing) {
  WorkerProcess w(WALSH_WORKER_FAULTS_BIN,
                  {"--tp", "2", "--debug-stall-rank", "1", "--collective-timeout-ms", "3000",
                   "--step-stall-seconds", "1"});
  ASSERT_TRUE(w.ok()) << w.process().stderr_text();
  std::thread stuck(
      [&] { (void)RunGenerate(*w.Generator(), Request("stall", 30, 0.0f, std::nullopt)); });
  // Before the collective gives up (after which the broken group keeps it NOT_SERVING anyway).
  EXPECT_TRUE(NotServingWithin(w, std::chrono::milliseconds(2800)));
  stuck.join();
  EXPECT_NE(w.process().stderr_text().find("\"event\":\"step_stalled\""), std::string::npos);
}

// SIGTERM drains: health turns NOT_SERVING, streams that can finish within
// --drain-grace-seconds finish whole, one that cannot (its client reads nothing, so the worker
// holds it) is ended, and the process exits 0.
TEST(WorkerService, SigtermDrainsAndExitsZero) {
  WorkerProcess w({"--drain-grace-seconds", "5", "--max-buffered-bytes", "4096"});
  ASSERT_TRUE(w.ok());
  auto held_stub = testing::NonReadingStub(w.target());
  grpc::ClientContext held_ctx;
  v1::GenerateRequest held_req = Request("never read", 4000, 0.0f, std::nullopt);
  held_req.set_logprobs(20);
  auto held = held_stub->Generate(&held_ctx, held_req);
  ASSERT_TRUE(w.WaitForMetric("walsh_worker_held_requests", 1));
  auto stub = w.Generator();
  std::vector<StreamResult> results(4);
  std::vector<std::thread> threads;
  std::atomic<int> started{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      grpc::ClientContext ctx;
      auto reader =
          stub->Generate(&ctx, Request("drain " + std::to_string(i), 150, 0.0f, std::nullopt));
      v1::GenerateResponse resp;
      while (reader->Read(&resp)) {
        if (resp.has_started()) ++started;
        for (const auto& t : resp.tokens().tokens()) results[i].ids.push_back(t.id());
        if (resp.has_finished()) results[i].finish_reason = resp.finished().reason();
      }
      results[i].status = reader->Finish();
    });
  }
  ASSERT_TRUE(testing::Eventually([&] { return started.load() >= 4; }, std::chrono::seconds(60)));
  w.process().Signal(SIGTERM);
  // Health flips to NOT_SERVING while in-flight streams finish.
  bool saw_not_serving = false;
  for (int i = 0; i < 200 && !saw_not_serving; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    grpc::health::v1::HealthCheckResponse h;
    const grpc::Status s = w.Health()->Check(&ctx, {}, &h);
    saw_not_serving = s.ok() && h.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING;
    if (!s.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(saw_not_serving);
  for (const StreamResult& r : results) {
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.ids.size(), 150u);
    EXPECT_EQ(r.finish_reason, "length");
  }
  EXPECT_EQ(w.process().Wait(std::chrono::seconds(15)), 0) << w.process().stderr_text();
  v1::GenerateResponse resp;
  bool finished = false;
  while (held->Read(&resp)) finished = finished || resp.has_finished();
  EXPECT_FALSE(finished);
  EXPECT_FALSE(held->Finish().ok());
}

// A client that opens a stream and never reads: once --max-buffered-bytes wait, the worker stops
// decoding it (held, its slot kept); after --stall-timeout-seconds without a read it cancels the
// request (slot and pages free while the client still holds the stream), and the stream ends
// RESOURCE_EXHAUSTED naming the flag when the client reads at last.
TEST(WorkerService, AClientThatStopsReadingIsHeldThenLosesItsSlot) {
  WorkerProcess w({"--max-buffered-bytes", "4096", "--stall-timeout-seconds", "3"});
  ASSERT_TRUE(w.ok());
  auto stub = testing::NonReadingStub(w.target());
  grpc::ClientContext ctx;
  v1::GenerateRequest req = Request("never read", 3000, 0.0f, std::nullopt);
  req.set_logprobs(20);  // large responses: HTTP/2 flow control stops the writes sooner
  req.mutable_stopping()->set_ignore_eos(true);
  auto reader = stub->Generate(&ctx, req);
  ASSERT_TRUE(w.WaitForMetric("walsh_worker_held_requests", 1));
  // Held at a step means the buffer was full then. Until the client's HTTP/2 window fills, the
  // transport can still take the write in flight and the stream runs again (a loaded machine
  // showed 212 bytes just after the first hold), so wait for the buffer to be full, then watch
  // it stay bounded until the stall.
  ASSERT_TRUE(w.WaitForMetricAtLeast("walsh_worker_buffered_bytes", 4096, 10));
  for (int i = 0; i < 10; ++i) {
    const std::optional<double> buffered = w.Metric("walsh_worker_buffered_bytes");
    ASSERT_TRUE(buffered.has_value());
    EXPECT_LE(*buffered, 2 * 4096);  // held: one response past the limit at most
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(w.process()
                  .WaitForStderrLine(
                      [](const std::string& l) {
                        return l.find("\"event\":\"client_not_reading\"") != std::string::npos;
                      },
                      std::chrono::seconds(60))
                  .has_value());
  const v1::Load load = testing::WaitForIdle(*w.Worker());
  EXPECT_EQ(load.running(), 0u);
  EXPECT_EQ(load.kv_pages_used(), 0u);
  EXPECT_EQ(load.state_slots_used(), 0u);
  EXPECT_TRUE(w.WaitForMetric("walsh_worker_stalled_streams_total", 1));
  // What waited behind the write in flight is gone; that write stays until the client reads.
  EXPECT_TRUE(testing::Eventually(
      [&] { return w.Metric("walsh_worker_buffered_bytes").value_or(4096) < 4096; },
      std::chrono::seconds(30), std::chrono::milliseconds(50)));
  // The client reads at last: what was sent, then the refusal.
  v1::GenerateResponse resp;
  int tokens = 0;
  while (reader->Read(&resp)) tokens += resp.has_tokens() ? resp.tokens().tokens_size() : 0;
  const grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("--stall-timeout-seconds"), std::string::npos);
  EXPECT_LT(tokens, 3000);
}

// A client that never reads and never goes: past the stall, it has a grace (10 s at least) to
// read its status; then the call is cancelled and the write it left stuck is freed.
TEST(WorkerService, AStalledCallIsCancelledAfterItsGrace) {
  InProcessWorker w({"--max-buffered-bytes", "4096", "--stall-timeout-seconds", "2"});
  ASSERT_TRUE(w.ok());
  auto stub = testing::NonReadingStub(w.target());
  grpc::ClientContext ctx;
  v1::GenerateRequest req = Request("never read", 3000, 0.0f, std::nullopt);
  req.set_logprobs(20);
  auto reader = stub->Generate(&ctx, req);
  ASSERT_TRUE(w.WaitForMetric("walsh_worker_stalled_streams_total", 1));
  EXPECT_TRUE(w.WaitForMetric("walsh_worker_buffered_bytes", 0));
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// Backpressure loses nothing: a client that reads only after its stream was held gets every
// token, the same tokens as a client that read all along.
TEST(WorkerService, AHeldStreamResumesExactlyWhenItsClientReads) {
  InProcessWorker w({"--max-buffered-bytes", "4096", "--stall-timeout-seconds", "60"});
  ASSERT_TRUE(w.ok());
  v1::GenerateRequest req = Request("read me late", 600, 0.9f, 4242);
  req.set_logprobs(20);
  req.mutable_stopping()->set_ignore_eos(true);
  auto stub = testing::NonReadingStub(w.target());
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, req);
  ASSERT_TRUE(w.WaitForMetric("walsh_worker_held_requests", 1));
  std::vector<int32_t> late;
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (!resp.has_tokens()) continue;
    for (const auto& t : resp.tokens().tokens()) late.push_back(t.id());
  }
  ASSERT_TRUE(reader->Finish().ok());
  const StreamResult read_along = RunGenerate(*w.Generator(), req);
  ASSERT_TRUE(read_along.status.ok()) << read_along.status.error_message();
  EXPECT_EQ(late.size(), 600u);
  EXPECT_EQ(late, read_along.ids);
}

// The worker's total: while --max-buffered-total bytes wait for clients, a new stream is refused
// by that name and counted; once the clients go, streams are admitted again.
TEST(WorkerService, NewStreamsAreRefusedPastTheBufferedTotal) {
  InProcessWorker w({"--max-buffered-bytes", "4096", "--max-buffered-total", "8192",
                     "--stall-timeout-seconds", "60"});
  ASSERT_TRUE(w.ok());
  auto stub = testing::NonReadingStub(w.target());
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>>> readers;
  for (int i = 0; i < 2; ++i) {
    v1::GenerateRequest req = Request("hold " + std::to_string(i), 3000, 0.0f, std::nullopt);
    req.set_logprobs(20);
    req.mutable_stopping()->set_ignore_eos(true);
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(stub->Generate(contexts.back().get(), req));
  }
  ASSERT_TRUE(w.WaitForMetric("walsh_worker_held_requests", 2));
  // A stream may be held for a moment while its transport catches up, then run on until its
  // client's HTTP/2 window is full: retry until both are held for good.
  StreamResult refused;
  testing::Eventually(
      [&] {
        refused = RunGenerate(*w.Generator(), Request("one more", 4, 0.0f, 1));
        return refused.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(100));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.status.error_message().find("--max-buffered-total"), std::string::npos)
      << refused.status.error_message();
  EXPECT_TRUE(w.WaitForMetric("walsh_worker_buffer_refusals_total", 1));
  for (auto& c : contexts) c->TryCancel();
  for (auto& r : readers) {
    v1::GenerateResponse resp;
    while (r->Read(&resp)) {
    }
    EXPECT_EQ(r->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(w.WaitForMetric("walsh_worker_buffered_bytes", 0));
  EXPECT_TRUE(RunGenerate(*w.Generator(), Request("one more", 4, 0.0f, 1)).status.ok());
}

// libprotobuf's own complaints (here: a string field that is not UTF-8) reach the log as JSON
// lines like every other line, never as "[libprotobuf ERROR ...]".
TEST(WorkerService, ProtobufComplaintsAreJsonLogLines) {
  WorkerProcess w;
  ASSERT_TRUE(w.ok());
  grpc::GenericStub stub(grpc::CreateChannel(w.target(), grpc::InsecureChannelCredentials()));
  const std::string bad(
      "\x0a\x03\xff\xfe"
      "A",
      5);  // TokenizeRequest.text: not UTF-8
  grpc::Slice slice(bad);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/walsh.v1.Generator/Tokenize", {}, &request, &response,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  EXPECT_FALSE(done.get_future().get().ok());
  ASSERT_TRUE(w.process()
                  .WaitForStderrLine(
                      [](const std::string& l) {
                        return l.find("\"event\":\"protobuf\"") != std::string::npos &&
                               l.find("walsh.v1.TokenizeRequest.text") != std::string::npos;
                      },
                      std::chrono::seconds(10))
                  .has_value());
  for (absl::string_view line :
       absl::StrSplit(w.process().stderr_text(), '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(nlohmann::json::accept(line)) << line;
  }
}

// A string field that is not UTF-8 (the C++ client serializes it anyway) gets INVALID_ARGUMENT
// naming the field, at any depth, not gRPC's bare UNIMPLEMENTED.
TEST(WorkerService, NonUtf8StringsAreRefusedNamingTheField) {
  InProcessWorker w;
  ASSERT_TRUE(w.ok());
  auto stub = w.Generator();
  testing::ExpectNonUtf8StringsRefused(*stub);
}

}  // namespace
}  // namespace walsh
