// PNG through libpng's classic interface, which, unlike its simplified one, leaves gamma alone: the
// model's processor reads the stored samples as they are, and so does walsh.
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/vision/alpha_composite.h"
#include "worker/vision/image_codecs.h"

namespace walsh {
namespace {

// Everything the decode touches lives here, outside the frame that calls setjmp, so a longjmp
// from libpng leaves no value indeterminate and skips no destructor.
struct PngDecode {
  absl::Span<const uint8_t> bytes;
  size_t offset = 0;
  int64_t max_pixels = 0;
  std::string error;
  absl::Status refusal;
  RgbImage image;
  std::vector<uint8_t> rgba;
  std::vector<png_bytep> rows;
};

void ReadBytes(png_structp png, png_bytep out, size_t n) {
  auto* d = static_cast<PngDecode*>(png_get_io_ptr(png));
  if (n > d->bytes.size() - d->offset) png_error(png, "the data ends early");
  std::memcpy(out, d->bytes.data() + d->offset, n);
  d->offset += n;
}

void OnError(png_structp png, png_const_charp message) {
  static_cast<PngDecode*>(png_get_error_ptr(png))->error = message;
  png_longjmp(png, 1);
}

void OnWarning(png_structp, png_const_charp) {}

// Returns false where libpng failed (d->error says why) or the header was refused (d->refusal).
bool Decode(png_structp png, png_infop info, PngDecode* d) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, d, ReadBytes);
  // Every ancillary chunk but tRNS is skipped, not inflated (a negative count covers the chunks
  // libpng knows: text, profiles): no compressed chunk can be a bomb.
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  png_set_chunk_cache_max(png, 128);
  png_set_chunk_malloc_max(png, 8 << 20);
  png_read_info(png, info);
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
  png_get_IHDR(png, info, &width, &height, &bit_depth, &color_type, nullptr, nullptr, nullptr);
  d->refusal = CheckImageSize("PNG", width, height, d->max_pixels);
  if (!d->refusal.ok()) return false;
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (bit_depth == 16) png_set_strip_16(png);
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(png);
  }
  png_set_filler(png, 0xff, PNG_FILLER_AFTER);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != size_t{width} * 4) png_error(png, "unexpected row layout");
  d->rgba.resize(size_t{width} * height * 4);
  d->rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y) d->rows[y] = d->rgba.data() + size_t{y} * width * 4;
  png_read_image(png, d->rows.data());
  d->image.width = width;
  d->image.height = height;
  return true;
}

}  // namespace

absl::StatusOr<RgbImage> DecodePng(absl::Span<const uint8_t> bytes, int64_t max_pixels) {
  PngDecode d{.bytes = bytes, .max_pixels = max_pixels};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &d, OnError, OnWarning);
  if (png == nullptr) return absl::ResourceExhaustedError("libpng could not start");
  png_infop info = png_create_info_struct(png);
  const bool ok = info != nullptr && Decode(png, info, &d);
  png_destroy_read_struct(&png, &info, nullptr);
  if (!d.refusal.ok()) return d.refusal;
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("the PNG is corrupt: ", d.error));
  RgbImage& image = d.image;
  image.rgb.resize(d.rgba.size() / 4 * 3);
  for (size_t i = 0, o = 0; i < d.rgba.size(); i += 4, o += 3) {
    const uint8_t alpha = d.rgba[i + 3];
    for (int c = 0; c < 3; ++c) {
      image.rgb[o + c] = alpha == 255 ? d.rgba[i + c] : CompositeOnWhite(d.rgba[i + c], alpha);
    }
  }
  return std::move(image);
}

}  // namespace walsh
