#include "worker/vision/bicubic_resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace walsh {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);  // rounds the fixed-point sums
constexpr double kSupport = 2.0;

double Bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// For each output index, the first input index it reads and its integer weights.
struct Taps {
  int64_t window = 0;  // weights per output index (some trailing ones zero)
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;  // window per output index
};

Taps ComputeTaps(int64_t in_size, int64_t out_size) {
  // The input's extent is a float in the processor's arithmetic; exact below 2^24.
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = kSupport * filter_scale;
  Taps taps;
  taps.window = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  taps.weights.assign(out_size * taps.window, 0);
  std::vector<double> k(taps.window);
  for (int64_t o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    const double ss = 1.0 / filter_scale;
    const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(center - support + 0.5));
    const int64_t hi = std::min<int64_t>(in_size, static_cast<int64_t>(center + support + 0.5));
    double sum = 0;
    for (int64_t x = 0; x < hi - lo; ++x) {
      k[x] = Bicubic((x + lo - center + 0.5) * ss);
      sum += k[x];
    }
    for (int64_t x = 0; x < hi - lo; ++x) {
      const double w = sum != 0.0 ? k[x] / sum : k[x];
      taps.weights[o * taps.window + x] = static_cast<int32_t>(
          w < 0 ? -0.5 + w * (1 << kPrecisionBits) : 0.5 + w * (1 << kPrecisionBits));
    }
    taps.first[o] = lo;
    taps.count[o] = hi - lo;
  }
  return taps;
}

uint8_t Clip8(int32_t sum) {
  return static_cast<uint8_t>(std::clamp(sum >> kPrecisionBits, 0, 255));
}

// Each output row's pixels from `in` rows [row_offset, ...), along the row.
RgbImage ResizeRows(const RgbImage& in, int64_t width, int64_t row_offset, int64_t rows) {
  const Taps taps = ComputeTaps(in.width, width);
  RgbImage out{.width = width, .height = rows, .rgb = std::vector<uint8_t>(width * rows * 3)};
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* src = in.Row(y + row_offset);
    uint8_t* dst = out.Row(y);
    for (int64_t x = 0; x < width; ++x) {
      const int32_t* w = &taps.weights[x * taps.window];
      const uint8_t* pixel = src + taps.first[x] * 3;
      int32_t sum[3] = {kHalf, kHalf, kHalf};
      for (int64_t t = 0; t < taps.count[x]; ++t, pixel += 3) {
        for (int c = 0; c < 3; ++c) sum[c] += pixel[c] * w[t];
      }
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = Clip8(sum[c]);
    }
  }
  return out;
}

}  // namespace

RgbImage ResizeBicubic(const RgbImage& image, int64_t width, int64_t height) {
  if (width == image.width && height == image.height) return image;
  const Taps vertical = ComputeTaps(image.height, height);
  // Only the rows the vertical pass reads go through the horizontal one.
  const int64_t first_row = vertical.first[0];
  const int64_t last_row = vertical.first[height - 1] + vertical.count[height - 1];
  const bool horizontal = width != image.width;
  RgbImage resized_rows;
  if (horizontal) resized_rows = ResizeRows(image, width, first_row, last_row - first_row);
  if (height == image.height) return resized_rows;
  const RgbImage& rows = horizontal ? resized_rows : image;
  const int64_t offset = horizontal ? first_row : 0;
  RgbImage out{.width = width, .height = height, .rgb = std::vector<uint8_t>(width * height * 3)};
  // Tap by tap, each a multiply-add over a whole input row; every sum still takes its taps in
  // order.
  std::vector<int32_t> sums(width * 3);
  for (int64_t y = 0; y < height; ++y) {
    const int32_t* w = &vertical.weights[y * vertical.window];
    std::fill(sums.begin(), sums.end(), kHalf);
    for (int64_t t = 0; t < vertical.count[y]; ++t) {
      const uint8_t* src = rows.Row(vertical.first[y] + t - offset);
      for (int64_t i = 0; i < width * 3; ++i) sums[i] += src[i] * w[t];
    }
    uint8_t* dst = out.Row(y);
    for (int64_t i = 0; i < width * 3; ++i) dst[i] = Clip8(sums[i]);
  }
  return out;
}

}  // namespace walsh
