// WorkerServer in-process: every flag's range refused by name; a file that is not a model
// refused (model_refused, not a usage error); a started worker that serves the tiny model and
// drains: the streams running when Drain begins end whole and equal to an undisturbed run, and
// a stream after it is refused; a vision projector checked against the model (--mmproj).
#include "worker/server/worker_server.h"

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_mmproj.h"
#include "tools/mkmodel/synthetic_model.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh {
namespace {

WorkerServer::Options Valid(const std::string& model) {
  WorkerServer::Options o;
  o.model = model;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:0";
  o.kv_cache_mb = 16;
  o.state_mb = 16;
  return o;
}

TEST(WorkerServerOptions, EveryRangeIsRefusedNamingItsFlag) {
  EXPECT_TRUE(Valid("m.gguf").Validate().ok());
  using Spoil = std::function<void(WorkerServer::Options&)>;
  const std::vector<std::pair<std::string, Spoil>> bad = {
      {"--model", [](auto& o) { o.model.clear(); }},
      {"--threads", [](auto& o) { o.threads = 0; }},
      {"--max-batch-tokens", [](auto& o) { o.max_batch_tokens = 0; }},
      {"--max-running", [](auto& o) { o.max_running = 0; }},
      {"--max-queue", [](auto& o) { o.max_queue = -1; }},
      {"--prepare-threads", [](auto& o) { o.prepare_threads = 65; }},
      {"--kv-cache-mb", [](auto& o) { o.kv_cache_mb = 0; }},
      {"--constraint-cache-mb", [](auto& o) { o.constraint_cache_mb = 0; }},
      {"--constraint-threads must be 0..64", [](auto& o) { o.constraint_threads = -1; }},
      {"--state-mb", [](auto& o) { o.state_mb = 0; }},
      {"--prefix-cache-bytes", [](auto& o) { o.prefix_cache_bytes = -1; }},
      {"--prefix-cache-min-tokens", [](auto& o) { o.prefix_cache_min_tokens = 0; }},
      {"--prefix-cache-snapshot-interval", [](auto& o) { o.prefix_cache_snapshot_interval = -1; }},
      {"--max-context", [](auto& o) { o.max_context = -1; }},
      {"--max-tokens", [](auto& o) { o.max_tokens = 0; }},
      {"--stall-timeout-seconds", [](auto& o) { o.buffers.stall_timeout_seconds = -1; }},
      {"--drain-grace-seconds", [](auto& o) { o.drain_grace_seconds = -1; }},
      {"--device", [](auto& o) { o.device = "tpu"; }},
      {"--tp", [](auto& o) { o.tp = 3; }},
      {"--tp must be 1 with --device cuda",
       [](auto& o) {
         o.device = "cuda";
         o.tp = 2;
       }},
      {"--nnodes must be 1 or --tp (2)",
       [](auto& o) {
         o.tp = 2;
         o.nnodes = 4;
       }},
      {"--node-rank",
       [](auto& o) {
         o.tp = o.nnodes = 2;
         o.node_rank = 2;
         o.dist_init_addr = "127.0.0.1:1";
       }},
      {"--node-rank", [](auto& o) { o.node_rank = 1; }},
      {"--nnodes needs --dist-init-addr", [](auto& o) { o.tp = o.nnodes = 2; }},
      {"--dist-timeout-seconds",
       [](auto& o) {
         o.tp = o.nnodes = 2;
         o.dist_init_addr = "127.0.0.1:1";
         o.dist_timeout_seconds = 0;
       }},
      {"--gpu-memory-utilization", [](auto& o) { o.gpu_memory_utilization = 0; }},
      {"--collective-timeout-ms", [](auto& o) { o.collective_timeout_ms = 0; }},
      {"--kv-cache-dtype", [](auto& o) { o.kv_cache_dtype = "fp8"; }},
      {"--speculative", [](auto& o) { o.speculative = "magic"; }},
      {"--num-speculative-tokens", [](auto& o) { o.num_speculative_tokens = 17; }},
      {"--speculative-max-batch", [](auto& o) { o.speculative_max_batch = 0; }},
      {"--speculative-min-acceptance", [](auto& o) { o.speculative_min_acceptance = 1.5; }},
      {"--speculative-ngram-min", [](auto& o) { o.speculative_ngram_min = 9; }},
      {"--http-listen cannot go with --tls-client-ca-file",
       [](auto& o) {
         o.http.listen = "127.0.0.1:0";
         o.tls.client_ca = "ca.pem";
       }},
  };
  for (const auto& [flag, spoil] : bad) {
    WorkerServer::Options o = Valid("m.gguf");
    spoil(o);
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_NE(s.message().find(flag), absl::string_view::npos) << flag << ": " << s;
  }
}

TEST(WorkerServer, AFileThatIsNotAModelIsRefusedAtLoad) {
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.File("not.gguf"), "GGUF but not really");
  auto started = WorkerServer::Start(Valid(dir.File("not.gguf")));
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(started.status().message().find("model_refused"), absl::string_view::npos)
      << started.status();
}

// --mmproj: a projector that fits the model is loaded, runs the canary, and ModelInfo lists the
// image modality and a fingerprint of its own; one whose width is another model's, or that is not a
// projector, is refused at load naming the key, and the worker does not serve.
TEST(WorkerServer, AVisionProjectorIsCheckedAgainstTheModelAndListedInModelInfo) {
  testing::TempDir dir;
  auto model = SyntheticModel::Create({.preset = "tiny"});
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE((*model)->WritePacked(dir.File("tiny.gguf")).ok());
  const int64_t hidden = (*model)->preset().config.embedding_length;
  ASSERT_TRUE(
      WriteSyntheticMmproj({.text_embedding_length = hidden}, dir.File("fits.mmproj")).ok());
  ASSERT_TRUE(
      WriteSyntheticMmproj({.text_embedding_length = hidden + 8}, dir.File("other.mmproj")).ok());

  const auto model_info = [](WorkerServer& worker) {
    auto stub = v1::Generator::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(worker.grpc_port()), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    EXPECT_TRUE(stub->GetModelInfo(&ctx, {}, &info).ok());
    return info;
  };
  const auto modalities = [](const v1::ModelInfo& info) {
    return std::vector<std::string>(info.modalities().begin(), info.modalities().end());
  };
  WorkerServer::Options o = Valid(dir.File("tiny.gguf"));
  std::string text_fingerprint;
  {
    auto text_only = WorkerServer::Start(o);
    ASSERT_TRUE(text_only.ok()) << text_only.status();
    const v1::ModelInfo info = model_info(**text_only);
    EXPECT_EQ(modalities(info), std::vector<std::string>{"text"});
    text_fingerprint = info.contract_fingerprint();
  }
  o.mmproj = dir.File("fits.mmproj");
  {
    auto vision = WorkerServer::Start(o);
    ASSERT_TRUE(vision.ok()) << vision.status();
    const v1::ModelInfo info = model_info(**vision);
    EXPECT_EQ(modalities(info), (std::vector<std::string>{"text", "image"}));
    // The projector is part of what the worker serves: a pool never mixes the two.
    EXPECT_EQ(info.contract_fingerprint().size(), 64u);
    EXPECT_NE(info.contract_fingerprint(), text_fingerprint);
  }
  o.mmproj = dir.File("other.mmproj");
  auto other = WorkerServer::Start(o);
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(
      std::string(other.status().message()),
      ::testing::AllOf(
          ::testing::HasSubstr("model_refused"), ::testing::HasSubstr("clip.vision.projection_dim"),
          ::testing::HasSubstr("the text model's hidden size is " + std::to_string(hidden))));
  o.mmproj = dir.File("tiny.gguf");  // a text model where a projector belongs
  auto text_as_projector = WorkerServer::Start(o);
  ASSERT_FALSE(text_as_projector.ok());
  EXPECT_THAT(std::string(text_as_projector.status().message()),
              ::testing::HasSubstr("projector " + dir.File("tiny.gguf")));
}

struct Stream {
  grpc::Status status;
  std::vector<int32_t> ids;
};

Stream Read(grpc::ClientReaderInterface<v1::GenerateResponse>& reader) {
  Stream s;
  v1::GenerateResponse r;
  while (reader.Read(&r)) {
    for (const auto& t : r.tokens().tokens()) s.ids.push_back(t.id());
  }
  s.status = reader.Finish();
  return s;
}

v1::GenerateRequest Request(int i) {
  v1::GenerateRequest r;
  r.set_text("drain " + std::to_string(i));
  r.mutable_sampling()->set_seed(100 + i);
  r.mutable_sampling()->set_temperature(0.7f);
  r.mutable_stopping()->set_max_tokens(1000);
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

TEST(WorkerServer, DrainLetsTheStreamsInFlightEndWhole) {
  testing::TempDir dir;
  auto model = SyntheticModel::Create({.preset = "tiny"});
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE((*model)->WritePacked(dir.File("tiny.gguf")).ok());
  WorkerServer::Options o = Valid(dir.File("tiny.gguf"));
  o.drain_grace_seconds = 60;
  o.max_running = 4;
  // The undisturbed streams, from a worker that is not drained.
  std::vector<std::vector<int32_t>> expected;
  {
    auto reference = WorkerServer::Start(o);
    ASSERT_TRUE(reference.ok()) << reference.status();
    auto stub = v1::Generator::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string((*reference)->grpc_port()),
                            grpc::InsecureChannelCredentials()));
    for (int i = 0; i < 4; ++i) {
      grpc::ClientContext ctx;
      auto reader = stub->Generate(&ctx, Request(i));
      Stream s = Read(*reader);
      ASSERT_TRUE(s.status.ok()) << s.status.error_message();
      expected.push_back(s.ids);
    }
  }
  auto started = WorkerServer::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  WorkerServer& worker = **started;
  auto stub = v1::Generator::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(worker.grpc_port()), grpc::InsecureChannelCredentials()));
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReaderInterface<v1::GenerateResponse>>> readers;
  for (int i = 0; i < 4; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(stub->Generate(contexts.back().get(), Request(i)));
    v1::GenerateResponse first;
    ASSERT_TRUE(readers.back()->Read(&first));  // Started: the request is in
    ASSERT_TRUE(first.has_started());
  }
  // They are still running (a thousand tokens each) when the drain begins.
  auto load_stub = v1::Worker::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(worker.grpc_port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext load_ctx;
  v1::Load load;
  ASSERT_TRUE(load_stub->GetLoad(&load_ctx, {}, &load).ok());
  EXPECT_GT(load.running() + load.waiting(), 0u);
  std::thread drain([&] { worker.Drain(15); });
  for (int i = 0; i < 4; ++i) {
    const Stream s = Read(*readers[i]);
    EXPECT_TRUE(s.status.ok()) << i << ": " << s.status.error_message();
    EXPECT_EQ(s.ids, expected[i]) << i;
  }
  drain.join();
  // Drained: a new stream is refused.
  grpc::ClientContext late;
  late.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto refused = stub->Generate(&late, Request(9));
  EXPECT_FALSE(Read(*refused).status.ok());
}

}  // namespace
}  // namespace walsh
