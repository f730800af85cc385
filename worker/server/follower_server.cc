#include "worker/server/follower_server.h"

#include <algorithm>
#include <utility>

#include "common/json_log.h"
#include "common/weights_memory.h"
#include "worker/model/model_file.h"
#include "worker/parallel/shard_plan.h"
#include "worker/server/model_info.h"
#include "worker/server/rank_group.h"

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
  const int64_t context = o.max_context > 0 ? std::min(o.max_context, file->config.context_length)
                                            : file->config.context_length;
  auto bound = Model::Bind(std::move(*file));
  if (!bound.ok()) return bound.status();
  const EngineOptions eo = EngineOptionsOf(o, context);
  auto plan = ShardPlan::Build((*bound)->file(), eo.tp);
  if (!plan.ok()) return plan.status();
  auto group = FormRankGroup(RankGroupOptionsOf(o, fingerprint, plan->DebugString()));
  if (!group.ok()) return group.status();
  LogJson("info", "rank_group_formed", {{"rank", o.node_rank}, {"size", o.nnodes}});
  auto follower = RankFollower::Create(std::move(*bound), eo, *std::move(group));
  if (!follower.ok()) return follower.status();
  f->follower_ = *std::move(follower);
  f->serving_.store(f->follower_.get(), std::memory_order_release);
  return f;
}

}  // namespace walsh
