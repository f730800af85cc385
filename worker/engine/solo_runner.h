// An engine with a KV manager of its own: how the tools (walsh-run, walsh-bench), a draft
// model's drafter and the tests run sequences without a scheduler. It owns both the way the
// scheduler does (worker/server/scheduler.h): the manager is planned from the cache budgets and
// the room the engine reports, and the engine allocates it.
#ifndef WALSH_WORKER_ENGINE_SOLO_RUNNER_H_
#define WALSH_WORKER_ENGINE_SOLO_RUNNER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"
#include "worker/engine/kv_manager.h"
#include "worker/engine/sequence_runner.h"

namespace walsh {

class SoloRunner : public SequenceRunner {
 public:
  static absl::StatusOr<std::unique_ptr<SoloRunner>> Create(std::unique_ptr<Model> model,
                                                            const EngineOptions& engine,
                                                            const CacheOptions& caches = {},
                                                            const EngineFaults& faults = {},
                                                            ProcessGroup process_group = {});
  // Runs on an engine built already.
  static absl::StatusOr<std::unique_ptr<SoloRunner>> Create(std::unique_ptr<Engine> engine,
                                                            const CacheOptions& caches = {});

 private:
  SoloRunner(std::unique_ptr<Engine> engine, std::unique_ptr<KvManager> kv)
      : SequenceRunner(engine.get(), kv.get()), engine_(std::move(engine)), kv_(std::move(kv)) {}

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<KvManager> kv_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_SOLO_RUNNER_H_
