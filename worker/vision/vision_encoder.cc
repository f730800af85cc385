#include "worker/vision/vision_encoder.h"

#include <algorithm>
#include <cmath>

#include "common/status_macros.h"
#include "kernels/cpu/f32_matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/query_block_attention.h"
#include "kernels/token_ops.h"
#include "kernels/vision_numerics.h"
#include "worker/vision/patch_layout.h"

namespace walsh {
namespace {

// y[i][o] = b[o] + Σ_k W[o][k] · x[i][k], for n rows of x, in tiles of rows by columns spread over
// the pool (a tile's rows stay in cache across its columns); each output summed whole by one
// thread in a fixed order (kernels/cpu/f32_matmul.h), so the pool's size changes no bit.
void Linear(CpuIsa isa, ThreadPool* pool, const float* x, int64_t n, int64_t in,
            const std::vector<float>& w, const std::vector<float>& b, int64_t out, float* y) {
  constexpr int64_t kTileRows = 48, kTileCols = 32;
  const int64_t row_tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t col_tiles = (out + kTileCols - 1) / kTileCols;
  const auto tiles = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t i0 = t / col_tiles * kTileRows, o0 = t % col_tiles * kTileCols;
      F32MatMulTileRun(isa, x, in, w.data(), b.data(), out,
                       {i0, std::min(n, i0 + kTileRows), o0, std::min(out, o0 + kTileCols)}, y);
    }
  };
  if (pool == nullptr) return tiles(0, row_tiles * col_tiles);
  pool->ParallelFor(row_tiles * col_tiles, 1, tiles);
}

void LayerNorm(const float* x, int64_t n, int64_t d, const std::vector<float>& w,
               const std::vector<float>& b, float eps, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const LayerNormStats stats = LayerNormRowStats(x + i * d, d, eps);
    for (int64_t k = 0; k < d; ++k) y[i * d + k] = LayerNormValue(x[i * d + k], stats, w[k], b[k]);
  }
}

// Full attention of every patch over every patch, head by head: every query's output is the
// text model's attention of one query (kernels/token_ops.h: scores, softmax, weighted values,
// each in position order), computed for a block of queries at a time
// (kernels/cpu/query_block_attention.h). qkv holds n rows of [Q | K | V], each `d` wide; each
// head's keys are first packed into panels and its values laid out contiguous, so a head's keys
// and values are read in sequence (in place, each lies 3·d floats from the next: a 4 KiB memory
// page apart at 1024²). Each task takes a block of queries of one head.
void Attention(CpuIsa isa, ThreadPool* pool, const float* qkv, int64_t n, int64_t d, int64_t heads,
               float* out) {
  constexpr int64_t kQueries = 16;
  const int64_t hd = d / heads, panel_floats = KeyPanelFloats(n, hd);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> keys(heads * panel_floats), values(n * d);  // [head][...]
  for (int64_t h = 0; h < heads; ++h) {
    PackKeyPanels(qkv + d + h * hd, 3 * d, n, hd, keys.data() + h * panel_floats);
    for (int64_t j = 0; j < n; ++j) {
      std::copy_n(qkv + j * 3 * d + 2 * d + h * hd, hd, values.data() + (h * n + j) * hd);
    }
  }
  const int64_t blocks = (n + kQueries - 1) / kQueries;
  const auto run = [&](int64_t begin, int64_t end) {
    std::vector<float> scores(kQueries * KeyPanelCount(n) * kKeyPanel);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t h = task / blocks, i0 = task % blocks * kQueries;
      const QueryBlockHead head{.key_panels = keys.data() + h * panel_floats,
                                .values = values.data() + h * n * hd,
                                .value_stride = hd,
                                .n_keys = n,
                                .head_dim = hd};
      AttendQueryBlock(isa, head, qkv + i0 * 3 * d + h * hd, 3 * d, std::min(kQueries, n - i0),
                       scale, scores.data(), out + i0 * d + h * hd, d);
    }
  };
  if (pool == nullptr) return run(0, heads * blocks);
  pool->ParallelFor(heads * blocks, 1, run);
}

}  // namespace

absl::StatusOr<std::vector<float>> VisionEncoder::EncodeImage(const PixelValues& pixels,
                                                              ThreadPool* pool) const {
  const MmprojConfig& c = w_.config;
  RETURN_IF_ERROR(CheckPixelGrid(c, pixels));
  const int64_t p = c.patch_size, m = c.spatial_merge_size, d = c.embedding_length;
  const PatchGrid grid = WindowOrder(pixels.height / p, pixels.width / p, m);
  const int64_t n = grid.size();

  // Patch embedding plus the resampled position table.
  std::vector<float> x(n * d);
  const std::vector<float> patches = GatherPatches(pixels, grid, p);
  Linear(isa_, pool, patches.data(), n, 3 * p * p, w_.patch_w, w_.patch_b, d, x.data());
  const PositionTaps taps = BilinearPositionTaps(grid, c.position_side());
  for (int64_t s = 0; s < n; ++s) {
    for (int tap = 0; tap < kPositionTaps; ++tap) {
      const float weight = taps.weight[s * kPositionTaps + tap];
      const float* t = w_.position.data() + taps.table_row[s * kPositionTaps + tap] * d;
      for (int64_t e = 0; e < d; ++e) x[s * d + e] += weight * t[e];
    }
  }

  const int64_t hd = c.head_dim(), ff = c.feed_forward_length;
  std::vector<float> a(n * d), qkv(n * 3 * d), attn(n * d), up(n * ff), y(n * d);
  const RopeTable rope = MakeRopeTable(grid, hd);
  for (const VisionBlockWeights& b : w_.blocks) {
    LayerNorm(x.data(), n, d, b.ln1_w, b.ln1_b, c.layer_norm_epsilon, a.data());
    Linear(isa_, pool, a.data(), n, d, b.qkv_w, b.qkv_b, 3 * d, qkv.data());
    for (int64_t s = 0; s < n; ++s) {
      for (int64_t h = 0; h < c.head_count; ++h) {
        const float* cs = rope.cos.data() + s * rope.half;
        const float* sn = rope.sin.data() + s * rope.half;
        Rope2dHead(qkv.data() + s * 3 * d + h * hd, cs, sn, rope.half);
        Rope2dHead(qkv.data() + s * 3 * d + d + h * hd, cs, sn, rope.half);
      }
    }
    Attention(isa_, pool, qkv.data(), n, d, c.head_count, attn.data());
    Linear(isa_, pool, attn.data(), n, d, b.out_w, b.out_b, d, y.data());
    for (int64_t i = 0; i < n * d; ++i) x[i] += y[i];
    LayerNorm(x.data(), n, d, b.ln2_w, b.ln2_b, c.layer_norm_epsilon, a.data());
    Linear(isa_, pool, a.data(), n, d, b.up_w, b.up_b, ff, up.data());
    for (float& v : up) v = GeluTanh(v);
    Linear(isa_, pool, up.data(), n, ff, b.down_w, b.down_b, d, y.data());
    for (int64_t i = 0; i < n * d; ++i) x[i] += y[i];
  }

  // Post-norm per patch; each window's m * m patches side by side through the merger.
  LayerNorm(x.data(), n, d, w_.post_ln_w, w_.post_ln_b, c.layer_norm_epsilon, a.data());
  const int64_t merged = c.merged_width(), tokens = n / (m * m);
  std::vector<float> hidden(tokens * merged), out(tokens * c.projection_dim);
  Linear(isa_, pool, a.data(), tokens, merged, w_.mm0_w, w_.mm0_b, merged, hidden.data());
  for (float& v : hidden) v = GeluErf(v);
  Linear(isa_, pool, hidden.data(), tokens, merged, w_.mm2_w, w_.mm2_b, c.projection_dim,
         out.data());
  return out;
}

}  // namespace walsh
