#include "tools/run/run_images.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"
#include "worker/vision/prompt_images.h"
#include "worker/vision/vision_model.h"

namespace walsh {

absl::StatusOr<std::vector<int32_t>> ImagePromptIds(const RunOptions& o, const Tokenizer& tokenizer,
                                                    int64_t text_hidden, PromptImages* images) {
  auto model = VisionModel::Load(o.mmproj, text_hidden);
  if (!model.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("--mmproj: ", model.status().message()));
  }
  ASSIGN_OR_RETURN(const VisionInput vision,
                   VisionInputFor(**model, tokenizer, {}, 256, static_cast<int>(o.threads)));
  std::vector<PreparedImage> prepared;
  for (absl::string_view path : absl::StrSplit(o.images, ',')) {
    auto file = MappedFile::Open(std::string(path));
    if (!file.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--image ", path, ": ", file.status().message()));
    }
    ASSIGN_OR_RETURN(PreparedImage image,
                     PrepareImage(vision, absl::StrCat("--image ", path),
                                  std::string_view(reinterpret_cast<const char*>((*file)->data()),
                                                   (*file)->size())));
    prepared.push_back(std::move(image));
  }
  // --prompt is used as is (its special tokens recognized), so every piece is markup.
  const std::vector<std::string> texts = absl::StrSplit(o.prompt, kImageMarker);
  const size_t markers = texts.size() - 1;
  if (markers > prepared.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--prompt has ", markers, " ", kImageMarker,
                                                   " markers for ", prepared.size(), " images"));
  }
  std::vector<PromptPiece> pieces;
  size_t next = 0;
  while (next < prepared.size() - markers) {  // images without a marker go first
    pieces.push_back({ImagePlaceholder(prepared[next++]), true});
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    pieces.push_back({texts[i], true});
    if (i < markers) pieces.push_back({ImagePlaceholder(prepared[next++]), true});
  }
  std::vector<int32_t> ids = tokenizer.Encode(pieces);
  ASSIGN_OR_RETURN(std::vector<ImageSpan> spans, LocateImages(ids, vision, prepared, "--prompt"));
  ASSIGN_OR_RETURN(*images, EncodeImages(vision, prepared, std::move(spans)));
  return ids;
}

}  // namespace walsh
