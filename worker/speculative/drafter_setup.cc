#include "worker/speculative/drafter_setup.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "worker/model/model_file.h"
#include "worker/speculative/draft_model_drafter.h"

namespace walsh {

absl::Status ValidateSpeculativeSpec(const std::string& spec) {
  if (spec == "off" || spec == "ngram" || (absl::StartsWith(spec, "draft:") && spec.size() > 6)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--speculative must be off, ngram or draft:FILE, not '", spec, "'"));
}

absl::StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const DrafterSetup& setup,
                                                     const Engine& target) {
  RETURN_IF_ERROR(ValidateSpeculativeSpec(setup.spec));
  if (setup.spec == "off") return nullptr;
  if (setup.spec == "ngram") return std::make_unique<NgramDrafter>(setup.ngram);
  absl::string_view path = setup.spec;
  absl::ConsumePrefix(&path, "draft:");
  auto named = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("--speculative draft:", path, ": ", s.message()));
  };
  absl::StatusOr<ModelFile> file = LoadModelFile(std::string(path));
  if (!file.ok()) return named(file.status());
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Bind(std::move(*file));
  if (!model.ok()) return named(model.status());
  EngineOptions o = setup.engine;
  o.tp = 1;
  o.max_context = target.max_context();
  CacheOptions caches = setup.caches;
  caches.prefix_caching = false;
  absl::StatusOr<std::unique_ptr<SoloRunner>> draft =
      SoloRunner::Create(std::move(*model), o, caches);
  if (!draft.ok()) return named(draft.status());
  absl::StatusOr<std::unique_ptr<DraftModelDrafter>> drafter = DraftModelDrafter::Create(
      std::move(*draft), target.model(), target.max_context(), setup.max_step_tokens);
  if (!drafter.ok()) return named(drafter.status());
  return std::unique_ptr<Drafter>(std::move(*drafter));
}

}  // namespace walsh
