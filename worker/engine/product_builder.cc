#include "worker/engine/product_builder.h"

#include "absl/strings/str_cat.h"
#include "kernels/block_types.h"

namespace walsh {

TernaryProduct ColumnParallelProduct(const Projection& p, const RowSelection& rows,
                                     int64_t n_tokens, Tensor y) {
  TernaryProduct product;
  product.w = p.w;
  product.x_stride = p.w.blocks_per_row();
  product.n_tokens = n_tokens;
  product.row_index = rows.index != nullptr ? rows.index->data() : nullptr;
  product.row_first = rows.begin;
  product.n_segments = 1;
  product.segment_end[0] = p.w.blocks_per_row();
  product.y[0] = y.f32();
  product.y_stride = y.cols;
  return product;
}

absl::StatusOr<TernaryProduct> SliceProduct(const Projection& p, int64_t n_tokens,
                                            int64_t x_first_col, int64_t x_cols,
                                            const std::vector<Span>& slices,
                                            const std::vector<Tensor>& partials) {
  if (slices.empty() || slices.size() > kMaxProductSegments || slices.size() != partials.size() ||
      x_first_col % kTernaryBlockElems != 0 || x_cols % kTernaryBlockElems != 0) {
    return absl::InternalError(
        absl::StrCat("'", p.name, "': bad slices for a row-parallel product"));
  }
  TernaryProduct product;
  product.w = p.w;
  product.x_stride = x_cols / kTernaryBlockElems;
  product.x_first_block = x_first_col / kTernaryBlockElems;
  product.n_tokens = n_tokens;
  product.n_segments = static_cast<int>(slices.size());
  product.y_stride = p.w.rows;
  for (size_t s = 0; s < slices.size(); ++s) {
    const Span& w = slices[s];
    if (w.begin % kTernaryBlockElems != 0 || w.end % kTernaryBlockElems != 0 ||
        w.begin < x_first_col || w.end > x_first_col + x_cols ||
        (s > 0 && w.begin != slices[s - 1].end)) {
      return absl::InternalError(absl::StrCat("'", p.name, "': slice [", w.begin, ", ", w.end,
                                              ") is not whole blocks of "
                                              "the held columns"));
    }
    product.segment_begin[s] = w.begin / kTernaryBlockElems;
    product.segment_end[s] = w.end / kTernaryBlockElems;
    product.y[s] = partials[s].f32();
  }
  return product;
}

}  // namespace walsh
