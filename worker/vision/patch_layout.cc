#include "worker/vision/patch_layout.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace walsh {

absl::Status CheckPixelGrid(const MmprojConfig& c, const PixelValues& pixels) {
  const int64_t side = c.patch_size * c.spatial_merge_size;
  if (pixels.height <= 0 || pixels.width <= 0 || pixels.height % side != 0 ||
      pixels.width % side != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the image's pixels are ", pixels.width, "x",
                                                   pixels.height, ", not positive multiples of ",
                                                   side, " (patch size times the merge)"));
  }
  if (pixels.planes.size() != static_cast<size_t>(3 * pixels.height * pixels.width)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the image's planes hold ", pixels.planes.size(), " values, not 3 x ",
                     pixels.width, " x ", pixels.height, " = ", 3 * pixels.height * pixels.width));
  }
  return absl::OkStatus();
}

PatchGrid WindowOrder(int64_t rows, int64_t cols, int64_t merge) {
  PatchGrid g{.rows = rows, .cols = cols};
  for (int64_t y = 0; y < rows / merge; ++y) {
    for (int64_t x = 0; x < cols / merge; ++x) {
      for (int64_t dy = 0; dy < merge; ++dy) {
        for (int64_t dx = 0; dx < merge; ++dx) {
          g.row.push_back(y * merge + dy);
          g.col.push_back(x * merge + dx);
        }
      }
    }
  }
  return g;
}

std::vector<float> GatherPatches(const PixelValues& pixels, const PatchGrid& grid, int64_t p) {
  const int64_t n = grid.size(), plane = pixels.height * pixels.width, patch_len = 3 * p * p;
  std::vector<float> patches(n * patch_len);
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t ch = 0; ch < 3; ++ch) {
      for (int64_t ky = 0; ky < p; ++ky) {
        const float* src = pixels.planes.data() + ch * plane +
                           (grid.row[s] * p + ky) * pixels.width + grid.col[s] * p;
        std::copy(src, src + p, patches.data() + s * patch_len + ch * p * p + ky * p);
      }
    }
  }
  return patches;
}

namespace {

struct Taps {
  int64_t lo, hi;
  float w_lo, w_hi;
};

// Position i of n along one side, on a table side entries long, corners aligned.
Taps AlignedCornerTaps(int64_t i, int64_t n, int64_t side) {
  const float src = static_cast<float>(i) * static_cast<float>(side - 1) /
                    static_cast<float>(std::max<int64_t>(n - 1, 1));
  const int64_t lo = static_cast<int64_t>(std::floor(src));
  const float frac = src - static_cast<float>(lo);
  return {lo, std::min(lo + 1, side - 1), 1.0f - frac, frac};
}

}  // namespace

PositionTaps BilinearPositionTaps(const PatchGrid& grid, int64_t side) {
  PositionTaps taps;
  for (int64_t s = 0; s < grid.size(); ++s) {
    const Taps r = AlignedCornerTaps(grid.row[s], grid.rows, side);
    const Taps c = AlignedCornerTaps(grid.col[s], grid.cols, side);
    for (const auto& [ri, rw] : {std::pair{r.lo, r.w_lo}, std::pair{r.hi, r.w_hi}}) {
      for (const auto& [ci, cw] : {std::pair{c.lo, c.w_lo}, std::pair{c.hi, c.w_hi}}) {
        taps.table_row.push_back(static_cast<int32_t>(ri * side + ci));
        taps.weight.push_back(rw * cw);
      }
    }
  }
  return taps;
}

RopeTable MakeRopeTable(const PatchGrid& grid, int64_t head_dim) {
  const int64_t half = head_dim / 2, quarter = head_dim / 4;
  std::vector<double> theta(quarter);
  for (int64_t f = 0; f < quarter; ++f) {
    theta[f] = std::pow(10000.0, -static_cast<double>(f) / static_cast<double>(quarter));
  }
  RopeTable t{.half = half};
  t.cos.reserve(grid.size() * half);
  t.sin.reserve(grid.size() * half);
  for (int64_t s = 0; s < grid.size(); ++s) {
    for (int64_t j = 0; j < half; ++j) {
      const float angle =
          static_cast<float>((j < quarter ? grid.row[s] : grid.col[s]) * theta[j % quarter]);
      t.cos.push_back(std::cos(angle));
      t.sin.push_back(std::sin(angle));
    }
  }
  return t;
}

}  // namespace walsh
