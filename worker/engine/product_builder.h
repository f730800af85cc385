// The kernel-level products (kernels/ternary_product.h) behind the backend's column-parallel
// and row-parallel ops, for every backend: host pointers in, which a device backend then swaps
// for its resident copies.
#ifndef WALSH_WORKER_ENGINE_PRODUCT_BUILDER_H_
#define WALSH_WORKER_ENGINE_PRODUCT_BUILDER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "kernels/ternary_product.h"
#include "worker/engine/backend.h"

namespace walsh {

// y[t][i] = W[row i of rows] · x[t] over all of p's input; x (int8 or fp32) is set by the caller.
TernaryProduct ColumnParallelProduct(const Projection& p, const RowSelection& rows,
                                     int64_t n_tokens, Tensor y);

// The product's input: x's int8 blocks (kQ8) or floats (kF32).
inline void SetProductInput(Tensor x, TernaryProduct* product) {
  if (x.dtype == DType::kQ8) {
    product->x = x.q8();
  } else {
    product->x_f32 = x.f32();
  }
}

// For each window slices[s] of p's input columns, every row's sum over it into partials[s]; x
// holds x_cols input columns from x_first_col. Refuses windows that are not whole 128-blocks
// inside x, or more than kMaxProductSegments of them.
absl::StatusOr<TernaryProduct> SliceProduct(const Projection& p, int64_t n_tokens,
                                            int64_t x_first_col, int64_t x_cols,
                                            const std::vector<Span>& slices,
                                            const std::vector<Tensor>& partials);

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_PRODUCT_BUILDER_H_
