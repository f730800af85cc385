#include "worker/vision/prompt_images.h"

#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/vision/image_codecs.h"
#include "worker/vision/image_decoder.h"
#include "worker/vision/image_size.h"
#include "worker/vision/smart_resize.h"

namespace walsh {
namespace {

uint64_t ImageDigest(std::string_view bytes, int64_t grid_h, int64_t grid_w) {
  Sha256 h;
  h.Update(bytes.data(), bytes.size());
  const int64_t grid[2] = {grid_h, grid_w};
  h.Update(grid, sizeof(grid));
  uint64_t out = 0;
  (void)absl::SimpleHexAtoi(h.HexDigest().substr(0, 16), &out);  // 16 hex digits: always parses
  return out;
}

}  // namespace

absl::StatusOr<VisionInput> VisionInputFor(const VisionModel& model, const Tokenizer& tokenizer,
                                           const ImageDecodeLimits& limits, int64_t max_images,
                                           int threads) {
  VisionInput v;
  v.model = &model;
  const MmprojConfig& c = model.config();
  v.preprocess.decode = limits;
  v.preprocess.patch_size = c.patch_size;
  v.preprocess.merge_size = c.spatial_merge_size;
  v.preprocess.mean = c.image_mean;
  v.preprocess.std = c.image_std;
  v.max_images = max_images;
  v.threads = threads;
  for (auto [name, id] :
       {std::pair{"<|vision_start|>", &v.vision_start}, std::pair{"<|image_pad|>", &v.image_pad},
        std::pair{"<|vision_end|>", &v.vision_end}}) {
    *id = tokenizer.FindToken(name);
    if (*id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the tokenizer has no ", name, " token, which images take (docs/vision.md §4)"));
    }
  }
  return v;
}

absl::StatusOr<ImageCost> ImageCostOf(const VisionInput& vision, absl::string_view field,
                                      std::string_view bytes) {
  const auto refused = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
  };
  if (bytes.empty()) return refused("an empty image");
  const ImageDecodeLimits& limits = vision.preprocess.decode;
  if (static_cast<int64_t>(bytes.size()) > limits.max_bytes) {
    return refused(absl::StrCat("the image is ", bytes.size(), " bytes, over the limit of ",
                                limits.max_bytes));
  }
  const auto span =
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  absl::StatusOr<ImageSize> size = ReadImageSize(span);
  if (!size.ok()) return refused(size.status().message());
  const std::string_view format = ImageFormatName(SniffImageFormat(span));
  if (absl::Status s =
          CheckImageSize(std::string(format).c_str(), size->width, size->height, limits.max_pixels);
      !s.ok()) {
    return refused(s.message());
  }
  const int64_t side = vision.preprocess.patch_size * vision.preprocess.merge_size;
  absl::StatusOr<ResizedSize> resized =
      SmartResize(size->height, size->width, side, vision.preprocess.tokens);
  if (!resized.ok()) return refused(resized.status().message());
  return ImageCost{.pixels = size->width * size->height,
                   .rows = (resized->height / side) * (resized->width / side)};
}

absl::StatusOr<PreparedImage> PrepareImage(const VisionInput& vision, std::string field,
                                           std::string_view bytes) {
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": an empty image"));
  auto pixels = PreprocessImage(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      vision.preprocess);
  if (!pixels.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", pixels.status().message()));
  }
  PreparedImage out;
  const int64_t side = vision.preprocess.patch_size * vision.preprocess.merge_size;
  out.grid_h = pixels->height / side;
  out.grid_w = pixels->width / side;
  out.digest = ImageDigest(bytes, out.grid_h, out.grid_w);
  out.pixels = std::move(*pixels);
  out.field = std::move(field);
  return out;
}

std::string ImagePlaceholder(const PreparedImage& image) {
  std::string out = "<|vision_start|>";
  for (int64_t i = 0; i < image.grid_h * image.grid_w; ++i) out += "<|image_pad|>";
  return out + "<|vision_end|>";
}

absl::StatusOr<std::vector<ImageSpan>> LocateImages(absl::Span<const int32_t> prompt,
                                                    const VisionInput& vision,
                                                    const std::vector<PreparedImage>& images,
                                                    absl::string_view prompt_field) {
  std::vector<ImageSpan> spans;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] != vision.image_pad) continue;
    size_t end = i;
    while (end < prompt.size() && prompt[end] == vision.image_pad) ++end;
    const size_t k = spans.size();
    if (k >= images.size() || i == 0 || prompt[i - 1] != vision.vision_start) {
      return absl::InvalidArgumentError(
          absl::StrCat(prompt_field, ": holds <|image_pad|> tokens (id ", vision.image_pad, ") at ",
                       i, " that no image placed; only an image part or piece may place them"));
    }
    const PreparedImage& image = images[k];
    const int64_t rows = image.grid_h * image.grid_w, run = static_cast<int64_t>(end - i);
    if (run != rows) {
      return absl::InvalidArgumentError(absl::StrCat(prompt_field, ": image ", k, " (", image.field,
                                                     ") has ", run, " <|image_pad|> tokens at ", i,
                                                     "; it gives ", rows, " rows"));
    }
    spans.push_back(
        {.first = static_cast<int64_t>(i), .grid_h = image.grid_h, .grid_w = image.grid_w});
    i = end - 1;
  }
  if (spans.size() != images.size()) {
    return absl::InvalidArgumentError(absl::StrCat(prompt_field, ": holds ", spans.size(),
                                                   " image placeholders for ", images.size(),
                                                   " images"));
  }
  return spans;
}

absl::StatusOr<PromptImages> EncodeImages(const VisionInput& vision,
                                          const std::vector<PreparedImage>& images,
                                          std::vector<ImageSpan> spans) {
  PromptImages out;
  out.width = vision.model->config().projection_dim;
  out.spans = std::move(spans);
  std::unique_ptr<ThreadPool> pool;
  if (vision.threads > 1) pool = std::make_unique<ThreadPool>(vision.threads);
  for (const PreparedImage& image : images) {
    ASSIGN_OR_RETURN(std::vector<float> rows,
                     vision.model->encoder().Encode(image.pixels, pool.get()));
    if (static_cast<int64_t>(rows.size()) != image.grid_h * image.grid_w * out.width) {
      return absl::InternalError(absl::StrCat(image.field, ": the encoder gave ", rows.size(),
                                              " values for a ", image.grid_h, "x", image.grid_w,
                                              " grid"));
    }
    out.rows.insert(out.rows.end(), rows.begin(), rows.end());
    out.digests.push_back(image.digest);
  }
  return out;
}

}  // namespace walsh
