#include "worker/engine/solo_runner.h"

#include "common/status_macros.h"

namespace walsh {

absl::StatusOr<std::unique_ptr<SoloRunner>> SoloRunner::Create(std::unique_ptr<Model> model,
                                                               const EngineOptions& engine,
                                                               const CacheOptions& caches,
                                                               const EngineFaults& faults,
                                                               ProcessGroup process_group) {
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> e,
                   Engine::Create(std::move(model), engine, faults, std::move(process_group)));
  return Create(std::move(e), caches);
}

absl::StatusOr<std::unique_ptr<SoloRunner>> SoloRunner::Create(std::unique_ptr<Engine> engine,
                                                               const CacheOptions& caches) {
  ASSIGN_OR_RETURN(std::unique_ptr<KvManager> kv, MakeKvManager(*engine, caches));
  return std::unique_ptr<SoloRunner>(new SoloRunner(std::move(engine), std::move(kv)));
}

}  // namespace walsh
