// The one device-neutral table of the packed ternary weight formats: what each ternary ggml type
// is (block size and bytes, bits per weight, the activation layout its kernels read). Every
// backend, kernel launcher, tool and the GGUF reader's type table (worker/model/ggml_types.h,
// which sizes tensors of every type) asks here about a ternary type. A type missing from the
// table is refused by whoever met it, never decoded as another format (docs/format.md §2, §3).
#ifndef WALSH_KERNELS_WEIGHT_FORMAT_H_
#define WALSH_KERNELS_WEIGHT_FORMAT_H_

#include <stdint.h>

#include "kernels/q8_activation.h"

namespace walsh {

enum class TernaryFormat : uint8_t { kPq2_0, kPtq1_0 };
// FormatTraits(TernaryFormat(i)) for i below this is every format.
constexpr int kTernaryFormatCount = static_cast<int>(TernaryFormat::kPtq1_0) + 1;

struct TernaryFormatTraits {
  TernaryFormat format;
  uint32_t ggml_type;
  const char* name;  // "PQ2_0"
  int block_elems;   // weights per block (128)
  int block_bytes;   // bytes per block
  double bits_per_weight;
  Q8Layout q8_layout;  // the order of int8 activations this format's kernels consume
};

const TernaryFormatTraits& FormatTraits(TernaryFormat format);
// The traits of a ternary ggml type, or null for any other type.
const TernaryFormatTraits* FindTernaryFormat(uint32_t ggml_type);

inline Q8Layout Q8LayoutFor(TernaryFormat format) { return FormatTraits(format).q8_layout; }

}  // namespace walsh

#endif  // WALSH_KERNELS_WEIGHT_FORMAT_H_
