#include "worker/vision/vision_encoder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/f32_matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/query_block_attention.h"
#include "kernels/token_ops.h"

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
    const float* xi = x + i * d;
    float mean = 0;
    for (int64_t k = 0; k < d; ++k) mean += xi[k];
    mean /= static_cast<float>(d);
    float var = 0;
    for (int64_t k = 0; k < d; ++k) var += (xi[k] - mean) * (xi[k] - mean);
    const float inv = 1.0f / std::sqrt(var / static_cast<float>(d) + eps);
    for (int64_t k = 0; k < d; ++k) y[i * d + k] = (xi[k] - mean) * inv * w[k] + b[k];
  }
}

// With walsh's own tanh and erf (kernels/numerics.h): the encoder's bits do not depend on the C
// library, and a device can compute them alike.
float GeluTanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + TanhF(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

float GeluErf(float x) { return 0.5f * x * (1.0f + ErfF(x * 0.7071067811865476f)); }

// The merge-window order of docs/vision.md §3.1: sequence index n holds patch (row, column).
struct PatchGrid {
  int64_t rows = 0, cols = 0;  // in patches
  std::vector<int64_t> row, col;
};

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

// The learned side x side table at (row, column) of a rows x cols grid: bilinear with aligned
// corners (§3.3).
struct Taps {
  int64_t lo, hi;
  float w_lo, w_hi;
};
Taps AlignedCornerTaps(int64_t i, int64_t n, int64_t side) {
  const float src = static_cast<float>(i) * static_cast<float>(side - 1) /
                    static_cast<float>(std::max<int64_t>(n - 1, 1));
  const int64_t lo = static_cast<int64_t>(std::floor(src));
  const float frac = src - static_cast<float>(lo);
  return {lo, std::min(lo + 1, side - 1), 1.0f - frac, frac};
}

// The 2D RoPE angles' cosines and sines of every patch (§3.5), computed once per image and shared
// by every layer, head, q and k: pair (j, j + half) turns by the row's angle for the first quarter
// of the head, by the column's for the second.
struct RopeTable {
  int64_t half = 0;
  std::vector<float> cos, sin;  // [patch][half]
};

RopeTable MakeRopeTable(const PatchGrid& grid, int64_t head_dim) {
  const int64_t half = head_dim / 2, quarter = head_dim / 4;
  RopeTable t{.half = half};
  for (size_t s = 0; s < grid.row.size(); ++s) {
    for (int64_t j = 0; j < half; ++j) {
      const int64_t f = j % quarter;
      const double theta =
          std::pow(10000.0, -static_cast<double>(f) / static_cast<double>(quarter));
      const float angle = static_cast<float>((j < quarter ? grid.row[s] : grid.col[s]) * theta);
      t.cos.push_back(std::cos(angle));
      t.sin.push_back(std::sin(angle));
    }
  }
  return t;
}

// Rotates q or k of one head of patch `s` in place.
void Rope2d(float* v, const RopeTable& t, int64_t s) {
  const float* cs = t.cos.data() + s * t.half;
  const float* sn = t.sin.data() + s * t.half;
  for (int64_t j = 0; j < t.half; ++j) {
    const float a = v[j], b = v[j + t.half];
    v[j] = a * cs[j] - b * sn[j];
    v[j + t.half] = b * cs[j] + a * sn[j];
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

absl::StatusOr<std::vector<float>> VisionEncoder::Encode(const PixelValues& pixels,
                                                         ThreadPool* pool) const {
  const MmprojConfig& c = w_.config;
  const int64_t p = c.patch_size, m = c.spatial_merge_size, d = c.embedding_length;
  if (pixels.height <= 0 || pixels.width <= 0 || pixels.height % (p * m) != 0 ||
      pixels.width % (p * m) != 0 ||
      pixels.planes.size() != static_cast<size_t>(3 * pixels.height * pixels.width)) {
    return absl::InvalidArgumentError(absl::StrCat("the image's pixels are ", pixels.width, "x",
                                                   pixels.height, ", not positive multiples of ",
                                                   p * m, " (patch size times the merge)"));
  }
  const PatchGrid grid = WindowOrder(pixels.height / p, pixels.width / p, m);
  const int64_t n = static_cast<int64_t>(grid.row.size());
  const int64_t plane = pixels.height * pixels.width, patch_len = 3 * p * p;

  // Patch embedding plus the resampled position table.
  std::vector<float> patches(n * patch_len), x(n * d);
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t ch = 0; ch < 3; ++ch) {
      for (int64_t ky = 0; ky < p; ++ky) {
        const float* src = pixels.planes.data() + ch * plane +
                           (grid.row[s] * p + ky) * pixels.width + grid.col[s] * p;
        std::copy(src, src + p, patches.data() + s * patch_len + ch * p * p + ky * p);
      }
    }
  }
  Linear(isa_, pool, patches.data(), n, patch_len, w_.patch_w, w_.patch_b, d, x.data());
  const int64_t side = c.position_side();
  for (int64_t s = 0; s < n; ++s) {
    const Taps r = AlignedCornerTaps(grid.row[s], grid.rows, side);
    const Taps q = AlignedCornerTaps(grid.col[s], grid.cols, side);
    const std::pair<int64_t, float> rows[2] = {{r.lo, r.w_lo}, {r.hi, r.w_hi}};
    const std::pair<int64_t, float> cols[2] = {{q.lo, q.w_lo}, {q.hi, q.w_hi}};
    for (const auto& [ri, rw] : rows) {
      for (const auto& [ci, cw] : cols) {
        const float* t = w_.position.data() + (ri * side + ci) * d;
        for (int64_t e = 0; e < d; ++e) x[s * d + e] += rw * cw * t[e];
      }
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
        Rope2d(qkv.data() + s * 3 * d + h * hd, rope, s);
        Rope2d(qkv.data() + s * 3 * d + d + h * hd, rope, s);
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
