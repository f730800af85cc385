#include "worker/server/worker_server.h"

#include <algorithm>
#include <chrono>

#include "common/huge_page_share.h"
#include "common/json_log.h"
#include "common/metrics.h"
#include "common/metrics_http_server.h"
#include "common/probe_server.h"
#include "common/status_macros.h"
#include "common/weights_memory.h"
#include "constraint/constraint_cache.h"
#include "constraint/mask_prefetcher.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "openai/http_metrics.h"
#include "openai/openai_server.h"
#include "worker/model/tokenizer_trie.h"
#include "worker/server/model_info.h"
#include "worker/server/services.h"
#include "worker/speculative/drafter_setup.h"
#include "worker/speculative/ngram_drafter.h"
#include "worker/vision/prompt_images.h"
#include "worker/vision/vision_model.h"

namespace walsh {
namespace {

constexpr char kVersion[] = "0.1.0";

void SetHealth(grpc::Server& server, bool serving) {
  grpc::HealthCheckServiceInterface* h = server.GetHealthCheckService();
  if (h == nullptr) return;
  h->SetServingStatus("", serving);
  h->SetServingStatus("walsh.v1.Generator", serving);
  h->SetServingStatus("walsh.v1.Worker", serving);
}

// Logged as `event` and returned: the worker cannot start (exit 1, not a usage error).
absl::Status Failed(const std::string& event, const absl::Status& s) {
  LogJson("error", event, {{"error", std::string(s.message())}});
  return absl::UnavailableError(absl::StrCat(event, ": ", s.message()));
}

}  // namespace

// Declared in the order they start; destroyed in reverse.
struct WorkerServer::Parts {
  Options options;
  MetricsRegistry registry;
  std::unique_ptr<WorkerMetrics> metrics;
  std::unique_ptr<BufferBudget> buffer_budget;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  ServiceContext ctx;
  std::unique_ptr<GeneratorService> generator;
  std::unique_ptr<WorkerService> worker;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::unique_ptr<ProbeServer> probe;
  // The HTTP face answers once the model serves (docs/operations.md §Gateway API Inference
  // Extension).
  std::atomic<bool> http_serving{false};
  std::string model_fingerprint;  // set once the model is loaded, before http_serving
  std::unique_ptr<HttpMetrics> http_metrics;
  std::unique_ptr<OpenAiServer> http_face;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<VisionModel> vision;
  std::unique_ptr<VisionInput> vision_input;  // what requests' images are taken with
  std::unique_ptr<Drafter> drafter;
  std::unique_ptr<MaskPrefetcher> mask_prefetcher;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<PreparePool> prepare;
  std::unique_ptr<PreparePool> prepare_images;  // with --mmproj
  std::shared_ptr<ConstraintCache> constraints;
};

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const Options& o) {
  RETURN_IF_ERROR(o.Validate());
  ASSIGN_OR_RETURN(HttpServerOptions http_options, o.http.Options(o.tls));
  ASSIGN_OR_RETURN(MediaFetchOptions media_options, o.http.Media());
  ASSIGN_OR_RETURN(auto credentials, MakeServerCredentials(o.tls));
  auto parts = std::make_unique<Parts>();
  Parts& p = *parts;
  p.options = o;
  p.metrics = std::make_unique<WorkerMetrics>(p.registry);
  p.buffer_budget = std::make_unique<BufferBudget>("the worker", o.buffers.max_total);
  AddBufferMetrics(p.registry, "walsh_worker", p.buffer_budget.get());
  AddProcessMetrics(p.registry);
  auto metrics_server = MetricsHttpServer::Start(o.metrics_listen, &p.registry);
  if (!metrics_server.ok()) return Failed("metrics_failed", metrics_server.status());
  p.metrics_server = std::move(*metrics_server);

  p.generator = std::make_unique<GeneratorService>(&p.ctx);
  p.worker = std::make_unique<WorkerService>(&p.ctx);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (o.tls.cert.empty() && !IsLoopbackAddress(o.listen)) {
    LogJson("warning", "plaintext",
            {{"listen", o.listen},
             {"message",
              "serving without TLS beyond loopback: anyone who reaches this port can "
              "generate; set --tls-cert-file and --tls-client-ca-file"}});
  }
  builder.AddListeningPort(o.listen, credentials, &p.port);
  // The gateway pings workers while its streams are open (walsh-gateway --worker-keepalive-ms,
  // at least 1 s apart); gRPC's default would refuse pings closer than 5 minutes.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.RegisterService(p.generator.get());
  builder.RegisterService(p.worker.get());
  p.server = builder.BuildAndStart();
  if (!p.server || p.port == 0) {
    return Failed("listen_failed", absl::UnavailableError("cannot listen on " + o.listen));
  }
  if (!o.probe_listen.empty()) {
    auto started = ProbeServer::Start(o.probe_listen, p.server.get());
    if (!started.ok()) return Failed("listen_failed", started.status());
    p.probe = std::move(*started);
  }
  SetHealth(*p.server, false);
  // "liveness": the process answers (Kubernetes livenessProbe); readiness is "".
  p.server->GetHealthCheckService()->SetServingStatus("liveness", true);
  // The worker's own OpenAI face: its calls go to this worker's Generator over an in-process
  // channel.
  p.http_metrics = std::make_unique<HttpMetrics>(p.registry, "walsh_worker_http");
  if (!o.http.listen.empty()) {
    OpenAiServerOptions ho;
    ho.http = http_options;
    ho.http.stream.budget = p.buffer_budget.get();
    ho.served_model_name = o.http.served_model_name;
    ho.chat_content_special_tokens = o.http.chat_content_special_tokens;
    ho.media = media_options;
    ho.ready = [&p] { return p.http_serving.load(); };
    ho.routable = [&p] { return p.http_serving.load(); };
    ho.fingerprint = [&p] { return p.http_serving ? p.model_fingerprint : std::string(); };
    auto started = OpenAiServer::Start(std::move(ho), p.server.get(), p.http_metrics.get());
    if (!started.ok()) return Failed("listen_failed", started.status());
    p.http_face = std::move(*started);
  }
  LogJson("info", "listening",
          {{"grpc_port", p.port},
           {"metrics_port", p.metrics_server->port()},
           {"http_port", p.http_face ? p.http_face->port() : 0}});

  // Load: NOT_SERVING until the model is mapped, checked, bound and a canary step ran.
  const auto load_start = std::chrono::steady_clock::now();
  WeightsMemory memory = WeightsMemory::kAuto;
  ParseWeightsMemory(o.weights_memory, &memory);  // checked with the other flags
  absl::StatusOr<ModelFile> file =
      LoadModelFile(o.model, WeightsMemoryFor(memory, o.device == "cuda"), o.mlock);
  if (!file.ok()) return Failed("model_refused", file.status());
  if (auto t = Tokenizer::FromGguf(*file->gguf); t.ok()) {
    p.tokenizer = std::move(*t);
  } else {
    LogJson("warning", "no_tokenizer", {{"error", std::string(t.status().message())}});
  }
  std::string fingerprint = ContractFingerprint(*file->gguf);
  const int64_t vocab = file->config.vocab_size;
  const int64_t context = ServingContext(o, file->config);
  v1::ModelInfo info = BuildModelInfo(*file, p.tokenizer.get(), context, o.max_tokens, fingerprint);
  const int64_t hidden_size = file->config.embedding_length;
  auto bound = Model::Bind(std::move(*file));
  if (!bound.ok()) return Failed("model_refused", bound.status());
  const EngineOptions eo = EngineOptionsOf(o, context);
  const EngineFaults faults{.stall_rank = static_cast<int>(o.debug_stall_rank)};
  ProcessGroup group;
  if (o.nnodes > 1) {
    // The leader: the followers join before the engine's first command reaches them.
    auto formed = JoinRankGroup(o, (*bound)->file(), fingerprint);
    if (!formed.ok()) return Failed("rank_group_failed", formed.status());
    group = *std::move(formed);
  }
  auto engine = Engine::Create(std::move(*bound), eo, faults, std::move(group));
  if (!engine.ok()) return Failed("engine_failed", engine.status());
  p.engine = std::move(*engine);
  if (!o.mmproj.empty()) {
    auto vision = VisionModel::Load(o.mmproj, hidden_size);
    if (!vision.ok()) return Failed("model_refused", vision.status());
    ThreadPool pool(static_cast<int>(o.threads));
    if (absl::Status s = (*vision)->Canary(&pool); !s.ok()) return Failed("canary_failed", s);
    p.vision = std::move(*vision);
    if (p.tokenizer == nullptr) {
      return Failed("model_refused", absl::InvalidArgumentError(absl::StrCat(
                                         o.model, ": --mmproj needs a model with a tokenizer")));
    }
    auto input = VisionInputFor(*p.vision, *p.tokenizer,
                                {.max_bytes = o.max_image_bytes, .max_pixels = o.max_image_pixels},
                                o.max_images_per_request, static_cast<int>(o.threads));
    if (!input.ok()) {
      return Failed("model_refused", absl::InvalidArgumentError(
                                         absl::StrCat(o.model, ": ", input.status().message())));
    }
    input->max_request_pixels = o.max_request_image_pixels;
    p.vision_input = std::make_unique<VisionInput>(*std::move(input));
    info.add_modalities("image");
    auto projector = GgufFile::Open(o.mmproj);
    if (!projector.ok()) return Failed("model_refused", projector.status());
    fingerprint = FingerprintWithProjector(fingerprint, **projector);
    info.set_contract_fingerprint(fingerprint);
  }
  const NgramDraftOptions ngram{.min_match = o.speculative_ngram_min,
                                .max_match = o.speculative_ngram_max,
                                .max_tokens = o.num_speculative_tokens};
  auto drafter = MakeDrafter({.spec = o.speculative,
                              .ngram = ngram,
                              .engine = eo,
                              .caches = CacheOptionsOf(o),
                              .max_step_tokens = o.max_batch_tokens},
                             *p.engine);
  if (!drafter.ok()) return Failed("model_refused", drafter.status());
  p.drafter = std::move(*drafter);
  const MaskLimits mask_limits{.work = o.constraint_mask_work,
                               .time = std::chrono::milliseconds(o.constraint_mask_timeout_ms)};
  if (p.tokenizer && o.constraint_threads > 0) {
    p.mask_prefetcher =
        std::make_unique<MaskPrefetcher>(static_cast<int>(o.constraint_threads), mask_limits);
  }
  auto scheduler = Scheduler::Create(
      p.engine.get(), CacheOptionsOf(o),
      SchedulerOptions{.max_batch_tokens = o.max_batch_tokens,
                       .max_running = o.max_running,
                       .max_queue = o.max_queue,
                       .prefix_min_tokens = o.prefix_cache_min_tokens,
                       .prefix_snapshot_interval = o.prefix_cache_snapshot_interval,
                       .speculative_tokens = p.drafter ? o.num_speculative_tokens : 0,
                       .speculative_max_batch = o.speculative_max_batch,
                       .speculative_min_acceptance = o.speculative_min_acceptance,
                       .drafter = p.drafter.get(),
                       .mask_prefetcher = p.mask_prefetcher.get()},
      p.metrics.get());
  // The budgets hold nothing, or the canary step failed.
  if (!scheduler.ok()) return Failed("engine_failed", scheduler.status());
  p.scheduler = std::move(*scheduler);
  p.prepare = std::make_unique<PreparePool>(static_cast<int>(o.prepare_threads),
                                            static_cast<size_t>(o.max_running + o.max_queue));
  if (p.vision_input) {
    p.prepare_images = std::make_unique<PreparePool>(
        static_cast<int>(o.image_threads), static_cast<size_t>(o.max_running + o.max_queue));
  }
  Engine& e = *p.engine;
  const CacheSize& cache = p.scheduler->cache_size();
  const int64_t token_capacity = cache.pages * cache.page_size;
  info.set_kv_page_size(static_cast<uint32_t>(cache.page_size));
  info.set_kv_cache_dtype(KvCacheDtypeName(e.kv_cache_dtype()));
  info.set_kv_bytes_per_token(static_cast<uint64_t>(cache.bytes_per_token));
  info.set_kv_token_capacity(static_cast<uint64_t>(token_capacity));
  if (cache.prefix_caching) {
    info.set_prefix_cache_min_tokens(static_cast<uint32_t>(o.prefix_cache_min_tokens));
  }
  WorkerMetrics& metrics = *p.metrics;
  metrics.build_info.gauge({kVersion, e.kernels()}).Set(1);
  metrics.kv_bytes_per_token.gauge({KvCacheDtypeName(e.kv_cache_dtype())})
      .Set(static_cast<double>(cache.bytes_per_token));
  metrics.model_info.gauge({"qwen35", info.weight_format(), info.name(), fingerprint}).Set(1);
  metrics.vllm_cache_config
      .gauge({std::to_string(cache.page_size), std::to_string(cache.pages),
              KvCacheDtypeName(e.kv_cache_dtype()), cache.prefix_caching ? "True" : "False"})
      .Set(1);
  p.ctx.tokenizer = p.tokenizer.get();
  if (p.tokenizer) {
    p.constraints = std::make_shared<ConstraintCache>(
        TokenizerTrie(*p.tokenizer), o.constraint_cache_mb << 20, p.mask_prefetcher.get());
    CollectConstraintMetrics(p.registry, metrics, p.constraints);
  }
  p.ctx.limits = {vocab,
                  context,
                  o.max_tokens,
                  p.tokenizer.get(),
                  p.constraints.get(),
                  p.vision_input.get(),
                  mask_limits};
  // The weights' pages as the kernel backs them, read from /proc/self/smaps at a scrape at most
  // every 10 s (docs/operations.md "Weights in memory"). The collector holds the range, not the
  // model: the metrics server may answer a scrape while the engine is being destroyed.
  const GgufFile& gguf = e.model().gguf();
  auto weight_memory = [begin = gguf.bytes(), size = gguf.file_size(), gauges = p.metrics.get()] {
    absl::StatusOr<HugePageShare> share = HugePageShareOf(begin, size);
    if (!share.ok()) return HugePageShare{};
    gauges->weight_resident_bytes.Set(static_cast<double>(share->resident_bytes));
    gauges->weight_hugepage_bytes.Set(static_cast<double>(share->huge_page_bytes));
    return *share;
  };
  // The registry runs its collectors one scrape at a time, under its lock: `last` needs no more.
  p.registry.AddCollector(
      [weight_memory, last = std::chrono::steady_clock::time_point{}]() mutable {
        const auto now = std::chrono::steady_clock::now();
        if (now - last < std::chrono::seconds(10)) return;
        last = now;
        weight_memory();
      });
  const HugePageShare loaded = weight_memory();
  info.set_weights_memory(WeightsMemoryName(gguf.memory().memory));
  info.set_weight_bytes(static_cast<uint64_t>(gguf.file_size()));
  info.set_weight_hugepage_bytes(static_cast<uint64_t>(loaded.huge_page_bytes));
  p.ctx.model_info = info;
  p.ctx.scheduler = p.scheduler.get();
  p.ctx.stream_buffers = o.buffers.Limits(p.buffer_budget.get());
  p.ctx.stalled_streams = &metrics.stalled_streams;
  p.ctx.prepare = p.prepare.get();
  p.ctx.prepare_images = p.prepare_images.get();
  p.ctx.ready = true;
  SetHealth(*p.server, true);
  p.model_fingerprint = fingerprint;
  p.http_serving = true;
  LogJson("info", "serving",
          {{"model", o.model},
           {"fingerprint", fingerprint},
           {"kernels", e.kernels()},
           {"weight_bytes", static_cast<int64_t>(gguf.file_size())},
           {"weights_memory", WeightsMemoryName(gguf.memory().memory)},
           {"weights_memory_reason", memory == WeightsMemory::kAuto && o.device == "cuda"
                                         ? std::string("auto: --device cuda")
                                         : gguf.memory().reason},
           {"weights_read_seconds", gguf.read_seconds()},
           {"weight_resident_bytes", loaded.resident_bytes},
           {"weight_hugepage_bytes", loaded.huge_page_bytes},
           {"load_seconds",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count()}});
  std::unique_ptr<WorkerServer> worker(new WorkerServer(std::move(parts)));
  worker->watch_ = std::thread([w = worker.get()] { w->WatchHealth(); });
  return worker;
}

WorkerServer::WorkerServer(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

WorkerServer::~WorkerServer() {
  if (!drained_) {
    parts_->options.drain_grace_seconds = 0;
    Drain(0);
  }
}

int WorkerServer::grpc_port() const { return parts_->port; }
int WorkerServer::metrics_port() const { return parts_->metrics_server->port(); }

void WorkerServer::WatchHealth() {
  const double stall = static_cast<double>(parts_->options.step_stall_seconds);
  bool stalled = false;
  while (!stop_watch_) {
    if (parts_->engine->broken()) {
      SetHealth(*parts_->server, false);
      parts_->http_serving = false;
      LogJson("error", "tp_group_broken",
              {{"error", "a collective failed (a rank stalled or left); not serving"}});
      return;
    }
    const double step = parts_->scheduler->StepSeconds();
    if (stall > 0 && (step > stall) != stalled) {
      // The gateway stops routing here while a step is stuck, and comes back when it ends.
      stalled = !stalled;
      SetHealth(*parts_->server, !stalled);
      parts_->http_serving = !stalled;
      LogJson(stalled ? "error" : "info", stalled ? "step_stalled" : "step_recovered",
              {{"step_seconds", step}, {"step_stall_seconds", stall}});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void WorkerServer::Drain(int signal) {
  Parts& p = *parts_;
  drained_ = true;
  stop_watch_ = true;
  if (watch_.joinable()) watch_.join();
  // NOT_SERVING first, stop admitting, let in-flight streams finish within the grace.
  LogJson("info", "draining",
          {{"signal", signal}, {"grace_seconds", p.options.drain_grace_seconds}});
  SetHealth(*p.server, false);
  p.http_serving = false;
  p.scheduler->StopAdmitting();
  p.prepare->Shutdown();  // what it still holds answers UNAVAILABLE at once
  if (p.prepare_images) p.prepare_images->Shutdown();
  const auto grace_end =
      std::chrono::steady_clock::now() + std::chrono::seconds(p.options.drain_grace_seconds);
  while (std::chrono::steady_clock::now() < grace_end) {
    const SchedulerLoad load = p.scheduler->Load();
    if (load.running == 0 && load.waiting == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  p.scheduler->CancelAll(absl::UnavailableError("the worker is shutting down"));
  if (p.http_face) p.http_face->WaitForHandlers(std::chrono::seconds(2));  // streams' last events
  p.http_face.reset();
  p.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  LogJson("info", "stopped");
}

}  // namespace walsh
