#include "worker/engine/sequence_runner.h"

#include <optional>

#include "common/status_macros.h"

namespace walsh {

absl::StatusOr<std::unique_ptr<KvManager>> MakeKvManager(Engine& engine,
                                                         const CacheOptions& options) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<KvManager> kv,
      KvManager::Plan(options, engine.CacheUnitsFor(options.page_size), engine.CacheRoom()));
  RETURN_IF_ERROR(engine.AllocateCaches(kv->plan(), options.page_size));
  return kv;
}

absl::StatusOr<SequenceId> SequenceRunner::AddSequence() { return AddSequence({}, nullptr); }

absl::StatusOr<SequenceId> SequenceRunner::AddSequence(absl::Span<const int32_t> tokens,
                                                       PrefixLookup* lookup) {
  ASSIGN_OR_RETURN(const KvManager::Started started, kv_->AddSequence(tokens));
  if (const absl::Status s = engine_->Copy(started.restore); !s.ok()) {
    (void)kv_->RemoveSequence(started.id);
    return s;
  }
  if (lookup != nullptr) *lookup = started.lookup;
  return started.id;
}

absl::StatusOr<bool> SequenceRunner::Snapshot(SequenceId id, bool speculative) {
  ASSIGN_OR_RETURN(const std::optional<KvManager::SnapshotPlan> plan,
                   kv_->PlanSnapshot(id, speculative));
  if (!plan) return false;
  if (const absl::Status s = engine_->Copy(plan->copy); !s.ok()) {
    kv_->DropSnapshot(plan->id);  // never restore a copy that did not complete
    return s;
  }
  return true;
}

absl::Status SequenceRunner::Rollback(SequenceId id, int64_t length) {
  ASSIGN_OR_RETURN(const int32_t plane, kv_->RollbackPlane(id, length));
  if (plane >= 0) {
    RETURN_IF_ERROR(engine_->Copy({.from_slot = plane, .to_slot = kv_->Find(id)->slot}));
  }
  kv_->Rollback(id, length);
  return absl::OkStatus();
}

absl::Status SequenceRunner::Checkpoint(SequenceId id) {
  ASSIGN_OR_RETURN(const CacheCopy copy, kv_->Checkpoint(id));
  if (const absl::Status s = engine_->Copy(copy); !s.ok()) {
    (void)kv_->EndCheckpoint(id, false);  // never restore a copy that did not complete
    return s;
  }
  return absl::OkStatus();
}

absl::Status SequenceRunner::RestoreCheckpoint(SequenceId id) {
  ASSIGN_OR_RETURN(const CacheCopy copy, kv_->CheckpointRestore(id));
  RETURN_IF_ERROR(engine_->Copy(copy));
  return kv_->EndCheckpoint(id, true);
}

absl::Status SequenceRunner::Canary() {
  ASSIGN_OR_RETURN(const SequenceId seq, AddSequence());
  const absl::Status step = Forward({{seq, {0}}}).status();
  const absl::Status removed = RemoveSequence(seq);
  return step.ok() ? removed : step;
}

absl::StatusOr<ForwardResult> SequenceRunner::Forward(const std::vector<SequenceInput>& batch) {
  RETURN_IF_ERROR(kv_->CheckStep(batch));
  std::vector<int64_t> lengths;
  lengths.reserve(batch.size());
  for (const SequenceInput& in : batch) lengths.push_back(kv_->Find(in.id)->length);
  RETURN_IF_ERROR(engine_->CheckStep(batch, lengths));
  RETURN_IF_ERROR(kv_->Reserve(batch));
  ASSIGN_OR_RETURN(ForwardResult result, engine_->Forward(batch, kv_->StepCaches(batch)));
  for (const SequenceInput& in : batch) kv_->Advance(in);
  return result;
}

}  // namespace walsh
