// What the vision encoder derives from an image's size before its layers run (docs/vision.md §3),
// on the host and shared by the CPU and CUDA encoders: the patches in merge-window order, each
// patch's taps into the learned position table, and the 2D rotary angles.
#ifndef WALSH_WORKER_VISION_PATCH_LAYOUT_H_
#define WALSH_WORKER_VISION_PATCH_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/vision_numerics.h"
#include "worker/model/mmproj_config.h"
#include "worker/vision/pixel_values.h"

namespace walsh {

// INVALID_ARGUMENT unless both sides are positive multiples of patch size times the merge and
// the planes hold 3 · height · width values.
absl::Status CheckPixelGrid(const MmprojConfig& c, const PixelValues& pixels);

// The merge-window order of §3.1: sequence index s holds patch (row[s], col[s]); each window's
// merge × merge patches are consecutive, windows in raster order.
struct PatchGrid {
  int64_t rows = 0, cols = 0;  // in patches
  std::vector<int64_t> row, col;

  int64_t size() const { return static_cast<int64_t>(row.size()); }
};
PatchGrid WindowOrder(int64_t rows, int64_t cols, int64_t merge);

// Every patch's 3 · p · p pixels (channel, row, column), one patch after another in grid order:
// the patch embedding's input rows.
std::vector<float> GatherPatches(const PixelValues& pixels, const PatchGrid& grid, int64_t p);

// A patch's position embedding: Σ over its 4 taps of weight · table row (§3.3: bilinear with
// aligned corners over the side × side table, the taps in the order (lo, lo), (lo, hi), (hi, lo),
// (hi, hi) of row and column; kPositionTaps of them).
struct PositionTaps {
  std::vector<int32_t> table_row;  // [patch][4]: row · side + column of the table
  std::vector<float> weight;       // [patch][4]: the row's weight times the column's
};
PositionTaps BilinearPositionTaps(const PatchGrid& grid, int64_t side);

// The 2D RoPE angles' cosines and sines of every patch (§3.5), shared by every layer, head, q
// and k: pair (j, j + half) turns by the row's angle for the first quarter of the head, by the
// column's for the second.
struct RopeTable {
  int64_t half = 0;
  std::vector<float> cos, sin;  // [patch][half]
};
RopeTable MakeRopeTable(const PatchGrid& grid, int64_t head_dim);

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_PATCH_LAYOUT_H_
