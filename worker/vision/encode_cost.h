// The work of one encode (docs/vision.md §3's cost formula): the linear layers' and attention's
// multiply-adds, counted twice, for a height × width image (sides multiples of patch · merge).
#ifndef WALSH_WORKER_VISION_ENCODE_COST_H_
#define WALSH_WORKER_VISION_ENCODE_COST_H_

#include <cstdint>

#include "worker/model/mmproj_config.h"

namespace walsh {

inline double EncodeFlop(const MmprojConfig& c, int64_t height, int64_t width) {
  const double p = static_cast<double>(c.patch_size);
  const double n =
      static_cast<double>(height / c.patch_size) * static_cast<double>(width / c.patch_size);
  const double d = static_cast<double>(c.embedding_length);
  const double ff = static_cast<double>(c.feed_forward_length);
  const double merge = static_cast<double>(c.spatial_merge_size * c.spatial_merge_size);
  const double merged = merge * d, tokens = n / merge;
  return 2 * n * d * 3 * p * p +
         static_cast<double>(c.block_count) * (2 * n * d * (4 * d + 2 * ff) + 4 * n * n * d) +
         2 * tokens * merged * (merged + static_cast<double>(c.projection_dim));
}

}  // namespace walsh

#endif  // WALSH_WORKER_VISION_ENCODE_COST_H_
