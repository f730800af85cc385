// walsh-worker: serves one model over walsh.v1 (gRPC) with continuous batching, health,
// reflection and Prometheus metrics.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "common/cli_flags.h"
#include "common/json_log.h"
#include "common/metrics.h"
#include "common/metrics_http_server.h"
#include "common/probe_server.h"
#include "common/protobuf_log.h"
#include "common/stream_buffer_flags.h"
#include "common/termination_signals.h"
#include "common/tls_credentials.h"
#include "gateway/http/http_flags.h"
#include "gateway/http/http_metrics.h"
#include "gateway/http/openai_server.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "worker/constraint/constraint_cache.h"
#include "worker/constraint/mask_prefetcher.h"
#include "worker/constraint/tokenizer_trie.h"
#include "worker/engine/ngram_drafter.h"
#include "worker/server/drafter_setup.h"
#include "worker/server/model_info.h"
#include "worker/server/services.h"

namespace walsh {
namespace {

constexpr char kVersion[] = "0.1.0";

struct Flags {
  std::string model, listen = "0.0.0.0:50051", metrics_listen = "0.0.0.0:9090", probe_listen;
  int64_t threads = 1, max_batch_tokens = 512, max_running = 16, max_queue = 256;
  int64_t prepare_threads = 2;
  int64_t kv_cache_mb = 512, state_mb = 512, constraint_cache_mb = 256, constraint_threads = 2,
          max_context = 0, max_tokens = 4096;
  int64_t drain_grace_seconds = 30;
  bool no_prefix_caching = false;
  int64_t prefix_cache_bytes = int64_t{256} << 20, prefix_cache_min_tokens = 128;
  int64_t prefix_cache_snapshot_interval = 512;
  StreamBufferFlags buffers;
  std::string device = "cpu";
  std::string kv_cache_dtype = "fp16";
  double gpu_memory_utilization = 0.9;
  int64_t tp = 1;
  int64_t collective_timeout_ms = 10000;
  std::string speculative = "off";
  int64_t num_speculative_tokens = 3, speculative_ngram_min = 1, speculative_ngram_max = 4;
  int64_t speculative_max_batch = 8;
  double speculative_min_acceptance = 0.3;
  int64_t debug_stall_rank = -1;  // walsh-worker-faults only
  ServerTlsFiles tls;
  HttpFlags http;
};

void SetHealth(grpc::Server& server, bool serving) {
  grpc::HealthCheckServiceInterface* h = server.GetHealthCheckService();
  if (h == nullptr) return;
  h->SetServingStatus("", serving);
  h->SetServingStatus("walsh.v1.Generator", serving);
  h->SetServingStatus("walsh.v1.Worker", serving);
}

int Fail(const std::string& event, const std::string& message) {
  LogJson("error", event, {{"error", message}});
  return 1;
}

int Run(int argc, char** argv) {
  Flags f;
  FlagSet flags(
      "walsh-worker --model FILE [--listen ADDR] [--metrics-listen ADDR] [--threads N] ...");
  flags.String("model", &f.model, "GGUF model file (required)");
  flags.String("listen", &f.listen, "gRPC address host:port (port 0: pick a free one)");
  flags.String("metrics-listen", &f.metrics_listen, "HTTP address of /metrics");
  flags.String("probe-listen", &f.probe_listen,
               "plaintext address serving only grpc.health.v1 Check, for probes that cannot "
               "speak TLS (off by default)");
  flags.Int("threads", &f.threads, "CPU threads of the engine");
  flags.Int("max-batch-tokens", &f.max_batch_tokens,
            "tokens per forward pass (prefill chunks + decodes)");
  flags.Int("max-running", &f.max_running, "sequences in the running batch");
  flags.Int("max-queue", &f.max_queue, "waiting requests; beyond: RESOURCE_EXHAUSTED");
  flags.Int("prepare-threads", &f.prepare_threads,
            "threads that tokenize prompts and compile constraints, apart from the gRPC threads "
            "that answer health checks; at most --max-running + --max-queue requests wait for "
            "them");
  flags.Int("kv-cache-mb", &f.kv_cache_mb, "memory for KV cache pages");
  flags.Int("constraint-cache-mb", &f.constraint_cache_mb,
            "memory for compiled structured-output constraints and their token masks");
  flags.Int("constraint-threads", &f.constraint_threads,
            "threads that compute structured-output token masks while the forward pass runs, "
            "and warm a new constraint's masks while its request waits, 0..64 (0: masks after "
            "the pass, on the scheduler's thread, and no warm-up); on the CPU backend they share "
            "the cores with --threads");
  flags.Int("state-mb", &f.state_mb, "memory for GatedDeltaNet state slots");
  flags.Bool("no-prefix-caching", &f.no_prefix_caching,
             "turn prefix caching off (shared KV pages and GatedDeltaNet state snapshots)");
  flags.Int("prefix-cache-bytes", &f.prefix_cache_bytes,
            "memory for the prefix cache's GatedDeltaNet state snapshots (whole state slots; "
            "the shared KV pages live in --kv-cache-mb and give way to running requests)");
  flags.Int("prefix-cache-min-tokens", &f.prefix_cache_min_tokens,
            "the shortest prefix a snapshot is taken for");
  flags.Int("prefix-cache-snapshot-interval", &f.prefix_cache_snapshot_interval,
            "during a long prefill, a snapshot every this many tokens (whole KV pages; 0: none), "
            "so the first request that branches off a shared document hits");
  flags.Int("max-context", &f.max_context, "prompt + output tokens per request (0: the model's)");
  flags.Int("max-tokens", &f.max_tokens, "the largest max_tokens a request may ask for");
  f.buffers.Register(flags);
  flags.Int("drain-grace-seconds", &f.drain_grace_seconds,
            "on SIGTERM: time for in-flight streams to finish before they are cancelled");
  flags.String("device", &f.device, "cpu or cuda (the first visible GPU)");
  flags.Double("gpu-memory-utilization", &f.gpu_memory_utilization,
               "with --device cuda: the share of the GPU's memory to use, (0, 1]");
  flags.String("kv-cache-dtype", &f.kv_cache_dtype,
               "KV page storage: fp16, q8 or q4 (int8 / 4-bit codes, an fp16 scale per 32 values)");
  flags.Int("tp", &f.tp, "tensor-parallel ranks: 1, 2, 4 or 8 in-process CPU ranks (--device cpu)");
  flags.Int(
      "collective-timeout-ms", &f.collective_timeout_ms,
      "a tensor-parallel collective slower than this fails the step; the worker turns NOT_SERVING");
  flags.String("speculative", &f.speculative,
               "speculative decoding: off, ngram (drafts by prompt lookup) or draft:FILE (drafts "
               "by a smaller model with the same vocabulary); drafts are verified in the same "
               "pass and the output is bit-identical to plain decoding");
  flags.Int("num-speculative-tokens", &f.num_speculative_tokens,
            "with --speculative: the most tokens drafted per decode step, 1..16");
  flags.Int("speculative-ngram-min", &f.speculative_ngram_min,
            "with --speculative ngram: the shortest suffix looked up");
  flags.Int("speculative-ngram-max", &f.speculative_ngram_max,
            "with --speculative ngram: the longest suffix looked up (tried first)");
  flags.Int("speculative-max-batch", &f.speculative_max_batch,
            "with --speculative: no drafting while more requests than this run");
  flags.Double("speculative-min-acceptance", &f.speculative_min_acceptance,
               "with --speculative: a request whose drafts are accepted less often than this "
               "(a moving rate, 0..1) pauses drafting for 4, 8, ... 64 steps; 0: never");
#ifdef WALSH_FAULT_INJECTION
  flags.Int("debug-stall-rank", &f.debug_stall_rank, "this rank stops answering");
#endif
  f.http.Register(flags,
                  "address of the worker's own OpenAI-compatible HTTP API (as the gateway's: "
                  "/v1/chat/completions, /v1/completions, /v1/models, /health), for the Gateway "
                  "API Inference Extension; HTTPS with --tls-cert-file; off by default");
  flags.String("tls-cert-file", &f.tls.cert, "PEM certificate chain: serve over TLS");
  flags.String("tls-key-file", &f.tls.key, "PEM private key of --tls-cert-file");
  flags.String("tls-client-ca-file", &f.tls.client_ca,
               "PEM CA: require and verify client certificates signed by it (mutual TLS)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "walsh-worker: %s\n%s", std::string(s.message()).c_str(),
                 flags.Help().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (f.model.empty() || f.threads < 1 || f.max_batch_tokens < 1 || f.max_running < 1 ||
      f.max_queue < 0 || f.kv_cache_mb < 1 || f.constraint_cache_mb < 1 || f.state_mb < 1 ||
      f.max_tokens < 1 || f.prefix_cache_bytes < 0 || f.prefix_cache_min_tokens < 1 ||
      f.prefix_cache_snapshot_interval < 0) {
    std::fprintf(stderr, "walsh-worker: --model is required and the limits must be positive\n%s",
                 flags.Help().c_str());
    return 2;
  }

  if (f.prepare_threads < 1 || f.prepare_threads > 64) {
    std::fprintf(stderr, "walsh-worker: --prepare-threads must be 1..64, not %lld\n",
                 static_cast<long long>(f.prepare_threads));
    return 2;
  }
  if (f.constraint_threads < 0 || f.constraint_threads > 64) {
    std::fprintf(stderr, "walsh-worker: --constraint-threads must be 0..64, not %lld\n",
                 static_cast<long long>(f.constraint_threads));
    return 2;
  }

  if (!f.http.listen.empty() && !f.tls.client_ca.empty()) {
    // The gRPC port admits only certified clients; an HTTP face beside it would admit anyone.
    std::fprintf(stderr,
                 "walsh-worker: --http-listen cannot go with --tls-client-ca-file: the HTTP API "
                 "does not check client certificates\n");
    return 2;
  }
  if (absl::Status s = f.buffers.Validate(); !s.ok()) {
    std::fprintf(stderr, "walsh-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<HttpServerOptions> http_options = f.http.Options(f.tls);
  if (!http_options.ok()) {
    std::fprintf(stderr, "walsh-worker: %s\n",
                 std::string(http_options.status().message()).c_str());
    return 2;
  }

  const NgramDraftOptions ngram{.min_match = f.speculative_ngram_min,
                                .max_match = f.speculative_ngram_max,
                                .max_tokens = f.num_speculative_tokens};
  if (absl::Status s = ValidateSpeculativeSpec(f.speculative); !s.ok()) {
    std::fprintf(stderr, "walsh-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (f.num_speculative_tokens < 1 || f.num_speculative_tokens > 16 ||
      f.speculative_max_batch < 1 || !(f.speculative_min_acceptance >= 0) ||
      f.speculative_min_acceptance > 1) {
    std::fprintf(stderr,
                 "walsh-worker: --num-speculative-tokens must be 1..16, "
                 "--speculative-max-batch at least 1 and --speculative-min-acceptance 0..1\n");
    return 2;
  }
  if (absl::Status s = ValidateNgramDraftOptions(ngram); !s.ok()) {
    std::fprintf(stderr, "walsh-worker: %s (--speculative-ngram-min, --speculative-ngram-max)\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  if (f.speculative != "off" && f.device == "cuda") {
    std::fprintf(stderr,
                 "walsh-worker: --speculative %s needs GatedDeltaNet state planes, which are not "
                 "built for --device cuda yet\n",
                 f.speculative.c_str());
    return 2;
  }

  Device device;
  if (!ParseDevice(f.device, &device) || (f.tp != 1 && f.tp != 2 && f.tp != 4 && f.tp != 8) ||
      (device == Device::kCuda && f.tp != 1) || f.gpu_memory_utilization <= 0 ||
      f.gpu_memory_utilization > 1) {
    std::fprintf(stderr,
                 "walsh-worker: --device must be cpu or cuda, --tp 1, 2, 4 or 8 (CPU ranks; 1 with "
                 "cuda), --gpu-memory-utilization in (0, 1]; got --device %s --tp %lld\n",
                 f.device.c_str(), static_cast<long long>(f.tp));
    return 2;
  }

  KvCacheDtype kv_cache_dtype;
  if (!ParseKvCacheDtype(f.kv_cache_dtype, &kv_cache_dtype)) {
    std::fprintf(stderr, "walsh-worker: --kv-cache-dtype must be fp16, q8 or q4; got %s\n",
                 f.kv_cache_dtype.c_str());
    return 2;
  }

  TerminationSignals signals;
  signals.Block();

  MetricsRegistry registry;
  WorkerMetrics metrics(registry);
  BufferBudget buffer_budget("the worker", f.buffers.max_total);
  AddBufferMetrics(registry, "walsh_worker", &buffer_budget);
  AddProcessMetrics(registry);
  auto metrics_server = MetricsHttpServer::Start(f.metrics_listen, &registry);
  if (!metrics_server.ok())
    return Fail("metrics_failed", std::string(metrics_server.status().message()));

  ServiceContext ctx;
  GeneratorService generator(&ctx);
  WorkerService worker(&ctx);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  auto credentials = MakeServerCredentials(f.tls);
  if (!credentials.ok()) {
    std::fprintf(stderr, "walsh-worker: %s\n", std::string(credentials.status().message()).c_str());
    return 2;
  }
  if (f.tls.cert.empty() && !IsLoopbackAddress(f.listen)) {
    LogJson("warning", "plaintext",
            {{"listen", f.listen},
             {"message",
              "serving without TLS beyond loopback: anyone who reaches this port can "
              "generate; set --tls-cert-file and --tls-client-ca-file"}});
  }
  builder.AddListeningPort(f.listen, *credentials, &grpc_port);
  // The gateway pings workers while its streams are open (walsh-gateway --worker-keepalive-ms,
  // at least 1 s apart); gRPC's default would refuse pings closer than 5 minutes.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.RegisterService(&generator);
  builder.RegisterService(&worker);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || grpc_port == 0) return Fail("listen_failed", "cannot listen on " + f.listen);
  std::unique_ptr<ProbeServer> probe;
  if (!f.probe_listen.empty()) {
    auto started = ProbeServer::Start(f.probe_listen, server.get());
    if (!started.ok()) return Fail("listen_failed", std::string(started.status().message()));
    probe = std::move(*started);
  }
  SetHealth(*server, false);
  // "liveness": the process answers (Kubernetes livenessProbe); readiness is "".
  server->GetHealthCheckService()->SetServingStatus("liveness", true);
  // The worker's own OpenAI face: its calls go to this worker's Generator over an in-process
  // channel, and it answers once the model serves (docs/operations.md §Gateway API Inference
  // Extension).
  std::atomic<bool> http_serving{false};
  std::string model_fingerprint;  // set once the model is loaded, before http_serving
  HttpMetrics http_metrics(registry, "walsh_worker_http");
  std::unique_ptr<OpenAiServer> http_face;
  if (!f.http.listen.empty()) {
    OpenAiServerOptions ho;
    ho.http = *http_options;
    ho.http.stream.budget = &buffer_budget;
    ho.served_model_name = f.http.served_model_name;
    ho.chat_content_special_tokens = f.http.chat_content_special_tokens;
    ho.ready = [&] { return http_serving.load(); };
    ho.routable = [&] { return http_serving.load(); };
    ho.fingerprint = [&] { return http_serving ? model_fingerprint : std::string(); };
    auto started = OpenAiServer::Start(std::move(ho), server.get(), &http_metrics);
    if (!started.ok()) return Fail("listen_failed", std::string(started.status().message()));
    http_face = std::move(*started);
  }
  LogJson("info", "listening",
          {{"grpc_port", grpc_port},
           {"metrics_port", (*metrics_server)->port()},
           {"http_port", http_face ? http_face->port() : 0}});

  // Load: NOT_SERVING until the model is mapped, checked, bound and a canary step ran.
  const auto load_start = std::chrono::steady_clock::now();
  absl::StatusOr<ModelFile> file = LoadModelFile(f.model);
  if (!file.ok()) return Fail("model_refused", std::string(file.status().message()));
  std::unique_ptr<Tokenizer> tokenizer;
  if (auto t = Tokenizer::FromGguf(*file->gguf); t.ok()) {
    tokenizer = std::move(*t);
  } else {
    LogJson("warning", "no_tokenizer", {{"error", std::string(t.status().message())}});
  }
  const std::string fingerprint = ContractFingerprint(*file->gguf);
  const int64_t vocab = file->config.vocab_size;
  const int64_t context = f.max_context > 0 ? std::min(f.max_context, file->config.context_length)
                                            : file->config.context_length;
  v1::ModelInfo info = BuildModelInfo(*file, tokenizer.get(), context, f.max_tokens, fingerprint);
  auto bound = Model::Bind(std::move(*file));
  if (!bound.ok()) return Fail("model_refused", std::string(bound.status().message()));
  EngineOptions eo;
  eo.threads = static_cast<int>(f.threads);
  eo.kv_cache_bytes = f.kv_cache_mb << 20;
  eo.state_bytes = f.state_mb << 20;
  eo.prefix_caching = !f.no_prefix_caching;
  eo.prefix_cache_bytes = f.prefix_cache_bytes;
  eo.max_context = context;
  eo.tp = static_cast<int>(f.tp);
  eo.collective_timeout = std::chrono::milliseconds(f.collective_timeout_ms);
  eo.device = device;
  eo.gpu_memory_utilization = f.gpu_memory_utilization;
  eo.kv_cache_dtype = kv_cache_dtype;
#ifdef WALSH_FAULT_INJECTION
  const EngineFaults faults{.stall_rank = static_cast<int>(f.debug_stall_rank)};
#else
  const EngineFaults faults;  // none in a shipped worker
#endif
  auto engine = Engine::Create(std::move(*bound), eo, faults);
  if (!engine.ok()) return Fail("engine_failed", std::string(engine.status().message()));
  {
    auto seq = (*engine)->AddSequence();
    absl::StatusOr<ForwardResult> canary =
        seq.ok() ? (*engine)->Forward({{*seq, {0}}}) : absl::StatusOr<ForwardResult>(seq.status());
    if (seq.ok()) (void)(*engine)->RemoveSequence(*seq);
    if (!canary.ok()) return Fail("canary_failed", std::string(canary.status().message()));
  }
  absl::StatusOr<std::unique_ptr<Drafter>> drafter = MakeDrafter(
      {.spec = f.speculative, .ngram = ngram, .engine = eo, .max_step_tokens = f.max_batch_tokens},
      **engine);
  if (!drafter.ok()) return Fail("model_refused", std::string(drafter.status().message()));
  std::unique_ptr<MaskPrefetcher> mask_prefetcher;
  if (tokenizer && f.constraint_threads > 0) {
    mask_prefetcher = std::make_unique<MaskPrefetcher>(static_cast<int>(f.constraint_threads));
  }
  Scheduler scheduler(engine->get(),
                      {.max_batch_tokens = f.max_batch_tokens,
                       .max_running = f.max_running,
                       .max_queue = f.max_queue,
                       .prefix_min_tokens = f.prefix_cache_min_tokens,
                       .prefix_snapshot_interval = f.prefix_cache_snapshot_interval,
                       .speculative_tokens = *drafter ? f.num_speculative_tokens : 0,
                       .speculative_max_batch = f.speculative_max_batch,
                       .speculative_min_acceptance = f.speculative_min_acceptance,
                       .drafter = drafter->get(),
                       .mask_prefetcher = mask_prefetcher.get()},
                      &metrics);
  PreparePool prepare(static_cast<int>(f.prepare_threads),
                      static_cast<size_t>(f.max_running + f.max_queue));
  info.set_kv_page_size(static_cast<uint32_t>((*engine)->page_size()));
  info.set_kv_cache_dtype(KvCacheDtypeName((*engine)->kv_cache_dtype()));
  info.set_kv_bytes_per_token(static_cast<uint64_t>((*engine)->kv_bytes_per_token()));
  info.set_kv_token_capacity(static_cast<uint64_t>((*engine)->kv_token_capacity()));
  if ((*engine)->prefix_caching()) {
    info.set_prefix_cache_min_tokens(static_cast<uint32_t>(f.prefix_cache_min_tokens));
  }
  metrics.build_info.gauge({kVersion, (*engine)->kernels()}).Set(1);
  metrics.kv_bytes_per_token.gauge({KvCacheDtypeName((*engine)->kv_cache_dtype())})
      .Set(static_cast<double>((*engine)->kv_bytes_per_token()));
  metrics.model_info.gauge({"qwen35", info.weight_format(), info.name(), fingerprint}).Set(1);
  metrics.vllm_cache_config
      .gauge({std::to_string((*engine)->page_size()),
              std::to_string((*engine)->kv_token_capacity() / (*engine)->page_size()),
              KvCacheDtypeName((*engine)->kv_cache_dtype()),
              (*engine)->prefix_caching() ? "True" : "False"})
      .Set(1);
  ctx.tokenizer = tokenizer.get();
  std::shared_ptr<ConstraintCache> constraints;
  if (tokenizer) {
    constraints = std::make_shared<ConstraintCache>(
        TokenizerTrie(*tokenizer), f.constraint_cache_mb << 20, mask_prefetcher.get());
    CollectConstraintMetrics(registry, metrics, constraints);
  }
  ctx.limits = {vocab, context, f.max_tokens, tokenizer.get(), constraints.get()};
  ctx.model_info = info;
  ctx.scheduler = &scheduler;
  ctx.stream_buffers = f.buffers.Limits(&buffer_budget);
  ctx.stalled_streams = &metrics.stalled_streams;
  ctx.prepare = &prepare;
  ctx.ready = true;
  SetHealth(*server, true);
  model_fingerprint = fingerprint;
  http_serving = true;
  LogJson("info", "serving",
          {{"model", f.model},
           {"fingerprint", fingerprint},
           {"kernels", (*engine)->kernels()},
           {"load_seconds",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count()}});

  // A broken tensor-parallel group (a rank stalled past the collective timeout) cannot serve:
  // NOT_SERVING, so the gateway routes elsewhere and Kubernetes replaces the pod.
  std::atomic<bool> stop_watch{false};
  std::thread watch([&] {
    while (!stop_watch) {
      if ((*engine)->broken()) {
        SetHealth(*server, false);
        http_serving = false;
        LogJson("error", "tp_group_broken", {{"error", "a collective timed out; not serving"}});
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  const int sig = signals.Wait();
  stop_watch = true;
  watch.join();
  // Drain: NOT_SERVING first, stop admitting, let in-flight streams finish within the grace.
  LogJson("info", "draining", {{"signal", sig}, {"grace_seconds", f.drain_grace_seconds}});
  SetHealth(*server, false);
  http_serving = false;
  scheduler.StopAdmitting();
  prepare.Shutdown();  // what it still holds answers UNAVAILABLE at once
  const auto grace_end =
      std::chrono::steady_clock::now() + std::chrono::seconds(f.drain_grace_seconds);
  while (std::chrono::steady_clock::now() < grace_end) {
    const SchedulerLoad load = scheduler.Load();
    if (load.running == 0 && load.waiting == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  scheduler.CancelAll(absl::UnavailableError("the worker is shutting down"));
  if (http_face) http_face->WaitForHandlers(std::chrono::seconds(2));  // streams' last events
  http_face.reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  LogJson("info", "stopped");
  return 0;
}

}  // namespace
}  // namespace walsh

int main(int argc, char** argv) {
  walsh::RouteProtobufLogsToJson();
  return walsh::Run(argc, argv);
}
