// walsh-worker as one object: its listeners (gRPC, metrics, probes, the OpenAI HTTP face), the
// model loaded behind them, the engine, the scheduler and the walsh.v1 services, started from
// Options and stopped by Drain. The binary (worker/server/main.cc) parses flags into Options and
// waits for a signal.
#ifndef WALSH_WORKER_SERVER_WORKER_SERVER_H_
#define WALSH_WORKER_SERVER_WORKER_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cli_flags.h"
#include "common/stream_buffer_flags.h"
#include "common/tls_credentials.h"
#include "constraint/mask_budget.h"
#include "openai/http_flags.h"
#include "worker/engine/engine_options.h"
#include "worker/server/rank_group.h"
#include "worker/server/scheduler.h"
#include "worker/speculative/ngram_drafter.h"

namespace walsh {

class WorkerServer {
 public:
  // Every flag of walsh-worker (docs/operations.md's table is its --help).
  struct Options {
    std::string model, listen = "0.0.0.0:50051", metrics_listen = "0.0.0.0:9090", probe_listen;
    std::string mmproj;  // a vision projector beside the model (docs/vision.md)
    int64_t max_images_per_request = 4, max_image_bytes = int64_t{20} << 20;
    int64_t max_image_pixels = 33'554'432, max_request_image_pixels = 67'108'864;
    int64_t image_threads = 1;
    // Defaults written once, where each option is used (the scheduler's, the engine's, the
    // n-gram drafter's); the flags start from them.
    int64_t threads = 1;
    int64_t max_batch_tokens = SchedulerOptions{}.max_batch_tokens;
    int64_t max_running = SchedulerOptions{}.max_running;
    int64_t max_queue = SchedulerOptions{}.max_queue;
    int64_t prepare_threads = 2;
    int64_t kv_cache_mb = 512, state_mb = 512, constraint_cache_mb = 256, constraint_threads = 2,
            max_context = 0, max_tokens = 4096;
    int64_t constraint_mask_work = MaskLimits::kDefaultWork;
    int64_t constraint_mask_timeout_ms = MaskLimits::kDefaultMilliseconds;
    int64_t drain_grace_seconds = 30;
    int64_t step_stall_seconds = 120;
    bool no_prefix_caching = false;
    int64_t prefix_cache_bytes = CacheOptions{}.prefix_cache_bytes;
    int64_t prefix_cache_min_tokens = SchedulerOptions{}.prefix_min_tokens;
    int64_t prefix_cache_snapshot_interval = SchedulerOptions{}.prefix_snapshot_interval;
    StreamBufferFlags buffers;
    std::string device = "cpu";
    std::string weights_memory = "auto";
    bool mlock = false;
    std::string kv_cache_dtype = "fp16";
    double gpu_memory_utilization = EngineOptions{}.gpu_memory_utilization;
    int64_t tp = 1;
    int64_t collective_timeout_ms = 10000;
    // A group across processes, one rank each (rank_group.h): 1, or --tp.
    int64_t nnodes = 1, node_rank = 0;
    std::string dist_init_addr, dist_host;
    int64_t dist_timeout_seconds = 300;
    std::string speculative = "off";
    int64_t num_speculative_tokens = NgramDraftOptions{}.max_tokens;
    int64_t speculative_ngram_min = NgramDraftOptions{}.min_match;
    int64_t speculative_ngram_max = NgramDraftOptions{}.max_match;
    int64_t speculative_max_batch = SchedulerOptions{}.speculative_max_batch;
    double speculative_min_acceptance = SchedulerOptions{}.speculative_min_acceptance;
    // A rank that stops answering: registered only by walsh-worker-faults (--debug-stall-rank).
    int64_t debug_stall_rank = -1;
    ServerTlsFiles tls;
    HttpFlags http;

    void Register(FlagSet& flags);
    // Every value's range, and the flags that exclude each other; the error names the flag.
    absl::Status Validate() const;
  };

  // Listens (NOT_SERVING), loads the model, binds it, runs a canary step, starts the scheduler:
  // serving when it returns. INVALID_ARGUMENT names the flag at fault; a listener or model that
  // fails is logged (listen_failed, model_refused, engine_failed, canary_failed) and returned
  // with another code.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const Options& options);
  ~WorkerServer();  // drains with no grace if Drain was not called

  int grpc_port() const;
  int metrics_port() const;
  // SIGTERM: NOT_SERVING, no new requests; in-flight streams get --drain-grace-seconds, then
  // the rest end UNAVAILABLE and the servers stop.
  void Drain(int signal);

 private:
  struct Parts;
  explicit WorkerServer(std::unique_ptr<Parts> parts);
  // A broken tensor-parallel group turns the worker NOT_SERVING for good; a step running past
  // --step-stall-seconds, until it ends.
  void WatchHealth();

  std::unique_ptr<Parts> parts_;
  std::atomic<bool> stop_watch_{false};
  std::thread watch_;
  bool drained_ = false;
};

// The tokens a request may span: --max-context, capped by the model's (0: the model's).
int64_t ServingContext(const WorkerServer::Options& o, const Qwen35Config& config);
// The engine's options from the worker's flags, for a context of `context` tokens.
EngineOptions EngineOptionsOf(const WorkerServer::Options& o, int64_t context);
// The budgets of the sequences' memory from the worker's flags (the scheduler plans it).
CacheOptions CacheOptionsOf(const WorkerServer::Options& o);
// This process's place in a group across processes (--nnodes, --node-rank, --dist-*), once every
// rank has joined with `file`'s shard plan and `fingerprint` (rank_group.h).
absl::StatusOr<ProcessGroup> JoinRankGroup(const WorkerServer::Options& o, const ModelFile& file,
                                           const std::string& fingerprint);

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_WORKER_SERVER_H_
