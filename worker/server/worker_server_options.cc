// WorkerServer::Options: walsh-worker's flags and their checks.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/json_log.h"
#include "common/request_ranges.h"
#include "common/status_macros.h"
#include "common/weights_memory.h"
#include "worker/engine/engine_options.h"
#include "worker/parallel/shard_plan.h"
#include "worker/server/worker_server.h"
#include "worker/speculative/drafter_setup.h"
#include "worker/speculative/ngram_drafter.h"

namespace walsh {

void WorkerServer::Options::Register(FlagSet& flags) {
  flags.String("model", &model, "GGUF model file (required)");
  flags.String("mmproj", &mmproj,
               "the model's vision projector (an mmproj GGUF, qwen3vl_merger): checked against "
               "the model at load and run by the canary; requests may then carry images "
               "(walsh.v1 image parts and pieces) and ModelInfo lists the image modality");
  flags.Int("max-images-per-request", &max_images_per_request,
            "with --mmproj: the most images one request may carry, 1..256");
  flags.Int("max-image-bytes", &max_image_bytes,
            "with --mmproj: the largest image file a request may carry, in bytes");
  flags.Int("max-image-pixels", &max_image_pixels,
            "with --mmproj: the most pixels (width x height) an image may decode to");
  flags.Int("max-request-image-pixels", &max_request_image_pixels,
            "with --mmproj: the most pixels all of a request's images may hold together, as "
            "their headers declare them (checked before any is decoded)");
  flags.Int("image-threads", &image_threads,
            "with --mmproj: threads that prepare requests carrying images (decode, preprocess, "
            "encode), apart from --prepare-threads, so tokenizing never waits behind an image; "
            "at most --max-running + --max-queue such requests wait for them");
  flags.String("listen", &listen, "gRPC address host:port (port 0: pick a free one)");
  flags.String("metrics-listen", &metrics_listen, "HTTP address of /metrics");
  flags.String("probe-listen", &probe_listen,
               "plaintext address serving only grpc.health.v1 Check, for probes that cannot "
               "speak TLS (off by default)");
  flags.Int("threads", &threads, "CPU threads of the engine");
  flags.Int("max-batch-tokens", &max_batch_tokens,
            "tokens per forward pass (prefill chunks + decodes)");
  flags.Int("max-running", &max_running, "sequences in the running batch");
  flags.Int("max-queue", &max_queue, "waiting requests; beyond: RESOURCE_EXHAUSTED");
  flags.Int("prepare-threads", &prepare_threads,
            "threads that tokenize prompts and compile constraints, apart from the gRPC threads "
            "that answer health checks; at most --max-running + --max-queue requests wait for "
            "them");
  flags.Int("kv-cache-mb", &kv_cache_mb, "memory for KV cache pages");
  flags.Int("constraint-cache-mb", &constraint_cache_mb,
            "memory for compiled structured-output constraints and their token masks");
  flags.Int("constraint-threads", &constraint_threads,
            "threads that compute structured-output token masks while the forward pass runs, "
            "and warm a new constraint's masks while its request waits, 0..64 (0: masks after "
            "the pass, on the scheduler's thread, and no warm-up); on the CPU backend they share "
            "the cores with --threads");
  flags.Int("step-stall-seconds", &step_stall_seconds,
            "a scheduler step running longer than this turns health NOT_SERVING until it ends, "
            "so the gateway routes around a stuck worker; 0: never");
  flags.Int("constraint-mask-work", &constraint_mask_work,
            "the most automaton work (stack elements expanded, trie nodes walked) one token's "
            "constraint mask, or its advance past the token, may take; past it the request ends "
            "with RESOURCE_EXHAUSTED naming the flag (docs/structured_output.md)");
  flags.Int("constraint-mask-timeout-ms", &constraint_mask_timeout_ms,
            "the longest one token's constraint mask may take, in milliseconds; past it the "
            "request ends with RESOURCE_EXHAUSTED naming the flag");
  flags.Int("state-mb", &state_mb, "memory for GatedDeltaNet state slots");
  flags.Bool("no-prefix-caching", &no_prefix_caching,
             "turn prefix caching off (shared KV pages and GatedDeltaNet state snapshots)");
  flags.Int("prefix-cache-bytes", &prefix_cache_bytes,
            "memory for the prefix cache's GatedDeltaNet state snapshots (whole state slots; "
            "the shared KV pages live in --kv-cache-mb and give way to running requests)");
  flags.Int("prefix-cache-min-tokens", &prefix_cache_min_tokens,
            "the shortest prefix a snapshot is taken for");
  flags.Int("prefix-cache-snapshot-interval", &prefix_cache_snapshot_interval,
            "during a long prefill, a snapshot every this many tokens (whole KV pages; 0: none), "
            "so the first request that branches off a shared document hits");
  flags.Int("max-context", &max_context, "prompt + output tokens per request (0: the model's)");
  flags.Int("max-tokens", &max_tokens, "the largest max_tokens a request may ask for");
  buffers.Register(flags);
  flags.Int("drain-grace-seconds", &drain_grace_seconds,
            "on SIGTERM: time for in-flight streams to finish before they are cancelled");
  flags.String("device", &device, "cpu or cuda (the first visible GPU)");
  flags.String("weights-memory", &weights_memory, kWeightsMemoryHelp);
  flags.Bool("mlock", &mlock, kMlockHelp);
  flags.Double("gpu-memory-utilization", &gpu_memory_utilization,
               "with --device cuda: the share of the GPU's memory to use, (0, 1]");
  flags.String("kv-cache-dtype", &kv_cache_dtype,
               "KV page storage: fp16, q8 or q4 (int8 / 4-bit codes, an fp16 scale per 32 values)");
  flags.Int("tp", &tp,
            "tensor-parallel ranks: 1, 2, 4 or 8 CPU ranks (--device cpu), in this process or one "
            "per process with --nnodes");
  flags.Int("nnodes", &nnodes,
            "processes the tensor-parallel group spans, one rank each: 1 (every rank in this "
            "process) or --tp");
  flags.Int("node-rank", &node_rank,
            "with --nnodes: this process's rank; 0 leads and serves, 1.. follow it and serve "
            "no requests");
  flags.String("dist-init-addr", &dist_init_addr,
               "with --nnodes: host:port of the group's handshake; the leader listens on its "
               "port, followers dial it");
  flags.String("dist-host", &dist_host,
               "with --nnodes: the address the other ranks reach this one on (empty: this host's "
               "name)");
  flags.Int("dist-timeout-seconds", &dist_timeout_seconds,
            "with --nnodes: how long the ranks wait for each other to join");
  flags.Int(
      "collective-timeout-ms", &collective_timeout_ms,
      "a tensor-parallel collective slower than this fails the step; the worker turns NOT_SERVING");
  flags.String("speculative", &speculative,
               "speculative decoding: off, ngram (drafts by prompt lookup) or draft:FILE (drafts "
               "by a smaller model with the same vocabulary); drafts are verified in the same "
               "pass and the output is bit-identical to plain decoding");
  flags.Int("num-speculative-tokens", &num_speculative_tokens,
            absl::StrCat("with --speculative: the most tokens drafted per decode step, 1..",
                         request_ranges::kMaxSpeculativeTokens));
  flags.Int("speculative-ngram-min", &speculative_ngram_min,
            "with --speculative ngram: the shortest suffix looked up");
  flags.Int("speculative-ngram-max", &speculative_ngram_max,
            "with --speculative ngram: the longest suffix looked up (tried first)");
  flags.Int("speculative-max-batch", &speculative_max_batch,
            "with --speculative: no drafting while more requests than this run");
  flags.Double("speculative-min-acceptance", &speculative_min_acceptance,
               "with --speculative: a request whose drafts are accepted less often than this "
               "(a moving rate, 0..1) pauses drafting for 4, 8, ... 64 steps; 0: never");
  http.Register(flags,
                "address of the worker's own OpenAI-compatible HTTP API (as the gateway's: "
                "/v1/chat/completions, /v1/completions, /v1/models, /health), for the Gateway "
                "API Inference Extension; HTTPS with --tls-cert-file; off by default");
  flags.String("tls-cert-file", &tls.cert, "PEM certificate chain: serve over TLS");
  flags.String("tls-key-file", &tls.key, "PEM private key of --tls-cert-file");
  flags.String("tls-client-ca-file", &tls.client_ca,
               "PEM CA: require and verify client certificates signed by it (mutual TLS)");
}

absl::Status WorkerServer::Options::Validate() const {
  if (model.empty()) return absl::InvalidArgumentError("--model is required");
  RETURN_IF_ERROR(FlagAtLeast("threads", threads, 1));
  RETURN_IF_ERROR(FlagAtLeast("max-batch-tokens", max_batch_tokens, 1));
  RETURN_IF_ERROR(FlagAtLeast("max-running", max_running, 1));
  RETURN_IF_ERROR(FlagAtLeast("max-queue", max_queue, 0));
  RETURN_IF_ERROR(FlagWithin("prepare-threads", prepare_threads, 1, 64));
  RETURN_IF_ERROR(FlagAtLeast("kv-cache-mb", kv_cache_mb, 1));
  RETURN_IF_ERROR(FlagAtLeast("constraint-cache-mb", constraint_cache_mb, 1));
  RETURN_IF_ERROR(FlagWithin("constraint-threads", constraint_threads, 0, 64));
  RETURN_IF_ERROR(FlagAtLeast("constraint-mask-work", constraint_mask_work, 1 << 16));
  RETURN_IF_ERROR(FlagAtLeast("constraint-mask-timeout-ms", constraint_mask_timeout_ms, 1));
  RETURN_IF_ERROR(FlagAtLeast("step-stall-seconds", step_stall_seconds, 0));
  RETURN_IF_ERROR(FlagAtLeast("state-mb", state_mb, 1));
  RETURN_IF_ERROR(FlagAtLeast("prefix-cache-bytes", prefix_cache_bytes, 0));
  RETURN_IF_ERROR(FlagAtLeast("prefix-cache-min-tokens", prefix_cache_min_tokens, 1));
  RETURN_IF_ERROR(FlagAtLeast("prefix-cache-snapshot-interval", prefix_cache_snapshot_interval, 0));
  RETURN_IF_ERROR(FlagAtLeast("max-context", max_context, 0));
  RETURN_IF_ERROR(FlagAtLeast("max-tokens", max_tokens, 1));
  RETURN_IF_ERROR(FlagWithin("max-images-per-request", max_images_per_request, 1, 256));
  RETURN_IF_ERROR(FlagAtLeast("max-image-bytes", max_image_bytes, 1));
  RETURN_IF_ERROR(FlagAtLeast("max-image-pixels", max_image_pixels, 1));
  RETURN_IF_ERROR(FlagAtLeast("max-request-image-pixels", max_request_image_pixels, 1));
  RETURN_IF_ERROR(FlagWithin("image-threads", image_threads, 1, 64));
  if (!mmproj.empty() && device != "cpu") {
    return absl::InvalidArgumentError(
        "--mmproj needs --device cpu: the CUDA backend's image inputs have not yet run on a GPU");
  }
  RETURN_IF_ERROR(buffers.Validate());
  RETURN_IF_ERROR(http.Media().status());
  RETURN_IF_ERROR(FlagAtLeast("drain-grace-seconds", drain_grace_seconds, 0));
  Device d;
  if (!ParseDevice(device, &d)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or cuda (got ", device, ")"));
  }
  WeightsMemory memory;
  if (!ParseWeightsMemory(weights_memory, &memory)) {
    return absl::InvalidArgumentError(absl::StrCat("--weights-memory must be ", kWeightsMemoryNames,
                                                   " (got ", weights_memory, ")"));
  }
  if (!WeightsMemoryFitsDevice(memory, d == Device::kCuda)) {
    return absl::InvalidArgumentError(kHugePagesOnGpuError);
  }
  if (mlock && d == Device::kCuda) return absl::InvalidArgumentError(kMlockOnGpuError);
  if (tp != 1 && tp != 2 && tp != 4 && tp != 8) {
    return absl::InvalidArgumentError(absl::StrCat("--tp must be 1, 2, 4 or 8 (got ", tp, ")"));
  }
  if (absl::Status s = CheckDeviceTp(d, tp); !s.ok()) {
    return absl::InvalidArgumentError(s.message());  // a flag error, as the others
  }
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpu-memory-utilization must be in (0, 1] (got ", gpu_memory_utilization, ")"));
  }
  RETURN_IF_ERROR(FlagAtLeast("collective-timeout-ms", collective_timeout_ms, 1));
  if (nnodes != 1 && nnodes != tp) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nnodes must be 1 or --tp (", tp,
                     "): a group across processes holds one rank in each "
                     "(got ",
                     nnodes, ")"));
  }
  RETURN_IF_ERROR(FlagWithin("node-rank", node_rank, 0, nnodes - 1));
  if (nnodes > 1) {
    if (dist_init_addr.empty()) {
      return absl::InvalidArgumentError(
          "--nnodes needs --dist-init-addr, the leader's handshake address (host:port)");
    }
    RETURN_IF_ERROR(FlagAtLeast("dist-timeout-seconds", dist_timeout_seconds, 1));
  }
  KvCacheDtype dtype;
  if (!ParseKvCacheDtype(kv_cache_dtype, &dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-cache-dtype must be fp16, q8 or q4 (got ", kv_cache_dtype, ")"));
  }
  RETURN_IF_ERROR(ValidateSpeculativeSpec(speculative));
  RETURN_IF_ERROR(FlagWithin("num-speculative-tokens", num_speculative_tokens, 1,
                             request_ranges::kMaxSpeculativeTokens));
  RETURN_IF_ERROR(FlagAtLeast("speculative-max-batch", speculative_max_batch, 1));
  if (!(speculative_min_acceptance >= 0 && speculative_min_acceptance <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculative-min-acceptance must be 0..1 (got ", speculative_min_acceptance, ")"));
  }
  if (absl::Status s = ValidateNgramDraftOptions({.min_match = speculative_ngram_min,
                                                  .max_match = speculative_ngram_max,
                                                  .max_tokens = num_speculative_tokens});
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (--speculative-ngram-min, --speculative-ngram-max)"));
  }
  if (speculative != "off" && d == Device::kCuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculative ", speculative,
        " with --device cuda: the GatedDeltaNet state planes on the device are built but not yet "
        "proven bit-identical on a GPU (docs/gpu.md)"));
  }
  if (!http.listen.empty() && !tls.client_ca.empty()) {
    // The gRPC port admits only certified clients; an HTTP face beside it would admit anyone.
    return absl::InvalidArgumentError(
        "--http-listen cannot go with --tls-client-ca-file: the HTTP API does not check client "
        "certificates");
  }
  return absl::OkStatus();
}

int64_t ServingContext(const WorkerServer::Options& o, const Qwen35Config& config) {
  return o.max_context > 0 ? std::min(o.max_context, config.context_length) : config.context_length;
}

EngineOptions EngineOptionsOf(const WorkerServer::Options& o, int64_t context) {
  EngineOptions eo;
  eo.threads = static_cast<int>(o.threads);
  eo.max_context = context;
  eo.tp = static_cast<int>(o.tp);
  eo.collective_timeout = std::chrono::milliseconds(o.collective_timeout_ms);
  ParseDevice(o.device, &eo.device);
  eo.gpu_memory_utilization = o.gpu_memory_utilization;
  ParseKvCacheDtype(o.kv_cache_dtype, &eo.kv_cache_dtype);
  return eo;
}

CacheOptions CacheOptionsOf(const WorkerServer::Options& o) {
  return {.kv_cache_bytes = o.kv_cache_mb << 20,
          .state_bytes = o.state_mb << 20,
          .prefix_caching = !o.no_prefix_caching,
          .prefix_cache_bytes = o.prefix_cache_bytes};
}

absl::StatusOr<ProcessGroup> JoinRankGroup(const WorkerServer::Options& o, const ModelFile& file,
                                           const std::string& fingerprint) {
  ASSIGN_OR_RETURN(const ShardPlan plan, ShardPlan::Build(file, static_cast<int>(o.tp)));
  ASSIGN_OR_RETURN(ProcessGroup group,
                   FormRankGroup({.rank = static_cast<int>(o.node_rank),
                                  .size = static_cast<int>(o.nnodes),
                                  .init_addr = o.dist_init_addr,
                                  .host = o.dist_host,
                                  .timeout = std::chrono::seconds(o.dist_timeout_seconds),
                                  .contract_fingerprint = fingerprint,
                                  .shard_plan = plan.DebugString()}));
  LogJson("info", "rank_group_formed", {{"rank", o.node_rank}, {"size", o.nnodes}});
  return group;
}

}  // namespace walsh
