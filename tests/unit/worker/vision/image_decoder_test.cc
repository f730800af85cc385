// Image decoding and resizing against Pillow, the model's processor's own library: for PNG (RGB,
// RGBA, grey, grey with alpha, palette with and without transparency, bilevel), JPEG (4:2:0,
// 4:4:4, progressive, grey) and WebP (lossy, lossy and lossless with alpha), walsh's pixels equal
// Pillow's decode flattened onto white, and its bicubic resize equals Image.resize(BICUBIC), byte
// for byte (tests/python/pil_image_reference.py draws the images and writes Pillow's results).
// Interlaced PNG is not among them: Pillow cannot write it. Then the one documented departure
// (16-bit samples), what is refused, and that a header's size is refused before anything is
// allocated.
#include "worker/vision/image_decoder.h"

#include <zlib.h>

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"
#include "worker/vision/bicubic_resize.h"
#include "worker/vision/image_size.h"

namespace walsh {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
template <size_t N>
std::vector<uint8_t> Literal(const char (&s)[N]) {  // every byte, NULs too, but the last
  return {s, s + N - 1};
}

class PillowImages : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    const auto run = testing::RunProcess(
        {WALSH_PYTHON_BIN, std::string(WALSH_SOURCE_DIR) + "/tests/python/pil_image_reference.py",
         dir_->path()});
    ASSERT_EQ(run.exit_code, 0) << run.err;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::vector<uint8_t> File(const std::string& name) {
    return Bytes(testing::ReadFileOrDie(dir_->File(name)));
  }
  static nlohmann::json Manifest() {
    return nlohmann::json::parse(testing::ReadFileOrDie(dir_->File("manifest.json")));
  }
  static testing::TempDir* dir_;
};
testing::TempDir* PillowImages::dir_ = nullptr;

TEST_F(PillowImages, DecodeAndResizeEqualPillowByteForByte) {
  const nlohmann::json manifest = Manifest();
  ASSERT_EQ(manifest.size(), 15u);
  for (const auto& c : manifest) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const auto decoded = DecodeImage(File(c["file"]), {});
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->width, c["width"].get<int64_t>());
    EXPECT_EQ(decoded->height, c["height"].get<int64_t>());
    EXPECT_TRUE(decoded->rgb == File(name + ".decoded.rgb")) << "decoded pixels differ";
    const RgbImage resized = ResizeBicubic(*decoded, c["resized_width"].get<int64_t>(),
                                           c["resized_height"].get<int64_t>());
    const std::vector<uint8_t> want = File(name + ".resized.rgb");
    ASSERT_EQ(resized.rgb.size(), want.size());
    int64_t differing = 0;
    for (size_t i = 0; i < want.size(); ++i) differing += resized.rgb[i] != want[i];
    EXPECT_EQ(differing, 0) << "of " << want.size() << " resized bytes";
  }
}

// The one departure from Pillow (docs/vision.md §2.1): a 16-bit sample keeps its high byte.
TEST_F(PillowImages, SixteenBitGreyKeepsItsHighBytes) {
  const auto decoded = DecodeImage(File("grey16.png"), {});
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->width, 40);
  EXPECT_EQ(decoded->height, 30);
  EXPECT_TRUE(decoded->rgb == File("grey16.high.rgb"));
}

// The header alone gives the size the decoder finds, in every format; a header cut short is
// refused as corrupt.
TEST_F(PillowImages, HeadersGiveTheDecodedSize) {
  for (const char* file : {"png_rgb.png", "jpeg_420.jpeg", "jpeg_progressive.jpeg",
                           "webp_lossy.webp", "webp_lossless_alpha.webp"}) {
    SCOPED_TRACE(file);
    const std::vector<uint8_t> bytes = File(file);
    const absl::StatusOr<ImageSize> size = ReadImageSize(bytes);
    const absl::StatusOr<RgbImage> image = DecodeImage(bytes, {});
    ASSERT_TRUE(size.ok()) << size.status();
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(size->width, image->width);
    EXPECT_EQ(size->height, image->height);
    const std::vector<uint8_t> head(bytes.begin(), bytes.begin() + 14);
    EXPECT_THAT(ReadImageSize(head).status().message(), HasSubstr("corrupt"));
  }
  EXPECT_THAT(ReadImageSize(Bytes("GIF89a........")).status().message(),
              HasSubstr("not PNG, JPEG or WebP"));
}

// A JPEG whose frame header says 60,000 x 60,000 is refused from the header.
TEST_F(PillowImages, AHugeJpegHeaderIsRefusedBeforeAnyAllocation) {
  std::vector<uint8_t> jpeg = File("jpeg_420.jpeg");
  size_t sof = 2;
  while (sof + 9 < jpeg.size() && !(jpeg[sof] == 0xff && jpeg[sof + 1] == 0xc0)) ++sof;
  ASSERT_LT(sof + 9, jpeg.size());
  for (size_t at : {sof + 5, sof + 7}) {  // height, then width, big-endian
    jpeg[at] = 60000 >> 8;
    jpeg[at + 1] = 60000 & 0xff;
  }
  const auto refused = DecodeImage(jpeg, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("60000x60000, over the limit"));
}

TEST_F(PillowImages, CmykAndAnimationAreRefusedByName) {
  const auto cmyk = DecodeImage(File("cmyk.jpeg"), {});
  EXPECT_EQ(cmyk.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cmyk.status().message(), HasSubstr("CMYK"));
  const auto animated = DecodeImage(File("animated.webp"), {});
  EXPECT_EQ(animated.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(animated.status().message(), HasSubstr("animated"));
}

TEST_F(PillowImages, TruncatedAndCorruptFilesAreRefused) {
  for (const char* file : {"png_rgb.png", "jpeg_420.jpeg", "jpeg_progressive.jpeg",
                           "webp_lossy.webp", "webp_lossless_alpha.webp"}) {
    SCOPED_TRACE(file);
    std::vector<uint8_t> bytes = File(file);
    bytes.resize(bytes.size() / 2);
    const auto truncated = DecodeImage(bytes, {});
    EXPECT_EQ(truncated.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(truncated.status().message(), HasSubstr("corrupt"));
  }
  // Cut short and closed with an EOI, which libjpeg (and Pillow) would fill grey: refused.
  for (const char* file : {"jpeg_420.jpeg", "jpeg_progressive.jpeg"}) {
    SCOPED_TRACE(file);
    std::vector<uint8_t> bytes = File(file);
    bytes.resize(bytes.size() * 2 / 3);
    bytes.push_back(0xff);
    bytes.push_back(0xd9);
    const auto cut = DecodeImage(bytes, {});
    EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(cut.status().message(), HasSubstr("ends early"));
  }
  std::vector<uint8_t> png = File("png_rgb.png");
  for (size_t i = 40; i < png.size() - 12; ++i) png[i] ^= 0x5a;  // past the header: bad CRCs
  EXPECT_THAT(DecodeImage(png, {}).status().message(), HasSubstr("the PNG is corrupt"));
  const auto unknown = DecodeImage(Bytes("GIF89a........"), {});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("not PNG, JPEG or WebP"));
  EXPECT_EQ(DecodeImage({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PillowImages, LimitsAreNamedInTheRefusal) {
  const std::vector<uint8_t> jpeg = File("jpeg_420.jpeg");  // 300 x 200
  EXPECT_TRUE(DecodeImage(jpeg, {.max_pixels = 60'000}).ok());
  const auto pixels = DecodeImage(jpeg, {.max_pixels = 59'999});
  EXPECT_EQ(pixels.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pixels.status().message(), HasSubstr("300x200, over the limit of 59999 pixels"));

  const auto bytes = DecodeImage(jpeg, {.max_bytes = 100});
  EXPECT_THAT(bytes.status().message(), HasSubstr("over the limit of 100"));
}

// A PNG chunk: length, type, data, CRC.
void AppendChunk(std::vector<uint8_t>& png, const char* type, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  const uLong crc = crc32(0, body.data(), static_cast<uInt>(body.size()));
  for (int s = 24; s >= 0; s -= 8) png.push_back(static_cast<uint8_t>(data.size() >> s));
  png.insert(png.end(), body.begin(), body.end());
  for (int s = 24; s >= 0; s -= 8) png.push_back(static_cast<uint8_t>(crc >> s));
}

// A PNG whose header says `width` x `height` (8-bit RGBA), then a few bytes of image data: at
// 100,000 x 100,000 (40 GB of RGBA) it must be refused from the header, which under
// AddressSanitizer would abort on an allocation that size.
std::vector<uint8_t> PngWithHeader(uint32_t width, uint32_t height) {
  std::vector<uint8_t> ihdr;
  for (uint32_t v : {width, height}) {
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back(static_cast<uint8_t>(v >> s));
  }
  for (uint8_t b : {8, 6, 0, 0, 0}) ihdr.push_back(b);
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  AppendChunk(png, "IHDR", ihdr);
  AppendChunk(png, "IDAT", {0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01});
  return png;
}

TEST(ImageDecoder, AHugeHeaderIsRefusedBeforeAnyAllocation) {
  const auto png = DecodeImage(PngWithHeader(100'000, 100'000), {});
  EXPECT_EQ(png.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(png.status().message(), HasSubstr("100000x100000, over the limit"));
  // The same file within the limits reaches its (too short) pixel data, and fails there.
  const auto small = DecodeImage(PngWithHeader(4, 4), {});
  EXPECT_THAT(small.status().message(), HasSubstr("the PNG is corrupt"));
}

TEST(ImageDecoder, SniffsByMagicBytes) {
  EXPECT_EQ(SniffImageFormat(Literal("\x89PNG\r\n\x1a\nrest")), ImageFormat::kPng);
  EXPECT_EQ(SniffImageFormat(Literal("\xff\xd8\xff\xe0")), ImageFormat::kJpeg);
  EXPECT_EQ(SniffImageFormat(Literal("RIFF\x10\0\0\0WEBPVP8 ")), ImageFormat::kWebp);
  EXPECT_EQ(SniffImageFormat(Literal("RIFF\x10\0\0\0WAVE")), ImageFormat::kUnknown);
  EXPECT_EQ(SniffImageFormat(Literal("\x89PN")), ImageFormat::kUnknown);
}

}  // namespace
}  // namespace walsh
