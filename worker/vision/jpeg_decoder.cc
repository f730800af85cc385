// JPEG through libjpeg-turbo with its default decode (accurate integer IDCT, smooth chroma
// upsampling), as the model's processor decodes it. Truncation is refused, not grey-filled.
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which uses FILE and size_t without including them
#include <vector>

// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "absl/strings/str_cat.h"
#include "worker/vision/image_codecs.h"

namespace walsh {
namespace {

constexpr int kMaxScans = 500;
constexpr char kTooManyScans[] = "more than 500 progressive scans";

// As in png_decoder.cc: the decode's state lives outside the frame that calls setjmp.
struct JpegDecode {
  jpeg_error_mgr errors;  // first: libjpeg hands the error manager back as a pointer to it
  std::jmp_buf jump;
  jpeg_progress_mgr progress;
  int64_t max_pixels = 0;
  char error[JMSG_LENGTH_MAX] = {};
  absl::Status refusal;
  RgbImage image;
};

// No C++ object may be alive on the way out: a longjmp skips destructors.
[[noreturn]] void Fail(j_common_ptr cinfo, const char* message) {
  auto* d = reinterpret_cast<JpegDecode*>(cinfo->err);
  std::snprintf(d->error, sizeof(d->error), "%s", message);
  std::longjmp(d->jump, 1);
}

[[noreturn]] void OnError(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<JpegDecode*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, d->error);
  std::longjmp(d->jump, 1);
}

// Warnings are corrupt-but-decodable data, which libjpeg repairs; running out of data is not,
// whether the file ends (EOF) or a marker, EOI most often, cuts a scan's data short: libjpeg
// would fill the rest with grey, as Pillow does. walsh refuses it (docs/vision.md §2.1).
void OnMessage(j_common_ptr cinfo, int level) {
  if (level != -1) return;
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) Fail(cinfo, "the data ends early");
  if (cinfo->err->msg_code == JWRN_HIT_MARKER) Fail(cinfo, "a scan's data ends early");
}

void OnProgress(j_common_ptr cinfo) {
  const auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->input_scan_number > kMaxScans) Fail(cinfo, kTooManyScans);
}

bool Decode(jpeg_decompress_struct* cinfo, absl::Span<const uint8_t> bytes, JpegDecode* d) {
  if (setjmp(d->jump)) return false;
  jpeg_create_decompress(cinfo);
  cinfo->progress = &d->progress;
  jpeg_mem_src(cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(cinfo, TRUE);
  d->refusal = CheckImageSize("JPEG", cinfo->image_width, cinfo->image_height, d->max_pixels);
  if (!d->refusal.ok()) return false;
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) {
    d->refusal = absl::InvalidArgumentError("the JPEG is CMYK, which walsh does not convert");
    return false;
  }
  cinfo->out_color_space = JCS_RGB;
  jpeg_start_decompress(cinfo);
  if (cinfo->output_components != 3) Fail(j_common_ptr(cinfo), "unexpected output layout");
  d->image.width = cinfo->output_width;
  d->image.height = cinfo->output_height;
  d->image.rgb.resize(size_t{cinfo->output_width} * cinfo->output_height * 3);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = d->image.Row(cinfo->output_scanline);
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  return true;
}

}  // namespace

absl::StatusOr<RgbImage> DecodeJpeg(absl::Span<const uint8_t> bytes, int64_t max_pixels) {
  JpegDecode d;
  d.max_pixels = max_pixels;
  jpeg_decompress_struct cinfo{};  // zero, so destroying it is safe if creating it failed
  cinfo.err = jpeg_std_error(&d.errors);
  d.errors.error_exit = OnError;
  d.errors.emit_message = OnMessage;
  d.progress.progress_monitor = OnProgress;
  const bool ok = Decode(&cinfo, bytes, &d);
  jpeg_destroy_decompress(&cinfo);
  if (!d.refusal.ok()) return d.refusal;
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("the JPEG is corrupt: ", d.error));
  return std::move(d.image);
}

}  // namespace walsh
