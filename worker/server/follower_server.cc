#include "worker/server/follower_server.h"

#include <utility>

#include "common/weights_memory.h"
#include "worker/model/model_file.h"
#include "worker/server/model_info.h"

namespace walsh {

absl::StatusOr<std::unique_ptr<FollowerServer>> FollowerServer::Start(
    const WorkerServer::Options& o) {
  std::unique_ptr<FollowerServer> f(new FollowerServer());
  AddProcessMetrics(f->registry_);
  Gauge& rank =
      f->registry_
          .AddGauge("walsh_follower_rank", "this follower's rank in its tensor-parallel group")
          .gauge();
  rank.Set(static_cast<double>(o.node_rank));
  Counter& steps =
      f->registry_
          .AddCounter("walsh_follower_steps_total", "steps this follower ran for its leader")
          .counter();
  // Scrapes run one at a time (under the registry's lock), from the metrics server's thread.
  FollowerServer* self = f.get();
  f->registry_.AddCollector([self, &steps] {
    const RankFollower* follower = self->serving_.load(std::memory_order_acquire);
    if (follower == nullptr) return;
    const double ran = static_cast<double>(follower->steps());
    if (ran > steps.value()) steps.Inc(ran - steps.value());
  });
  auto metrics = MetricsHttpServer::Start(o.metrics_listen, &f->registry_);
  if (!metrics.ok()) return metrics.status();
  f->metrics_server_ = *std::move(metrics);

  WeightsMemory memory = WeightsMemory::kAuto;
  ParseWeightsMemory(o.weights_memory, &memory);  // checked with the other flags
  absl::StatusOr<ModelFile> file = LoadModelFile(o.model, WeightsMemoryFor(memory, false), o.mlock);
  if (!file.ok()) return file.status();
  const std::string fingerprint = ContractFingerprint(*file->gguf);
  const int64_t context = ServingContext(o, file->config);
  auto bound = Model::Bind(std::move(*file));
  if (!bound.ok()) return bound.status();
  auto group = JoinRankGroup(o, (*bound)->file(), fingerprint);
  if (!group.ok()) return group.status();
  auto follower =
      RankFollower::Create(std::move(*bound), EngineOptionsOf(o, context), *std::move(group));
  if (!follower.ok()) return follower.status();
  f->follower_ = *std::move(follower);
  f->serving_.store(f->follower_.get(), std::memory_order_release);
  return f;
}

}  // namespace walsh
