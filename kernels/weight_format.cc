#include "kernels/weight_format.h"

#include "kernels/block_types.h"

namespace walsh {
namespace {

constexpr TernaryFormatTraits kFormats[] = {
    {TernaryFormat::kPq2_0, 142, "PQ2_0", kTernaryBlockElems, sizeof(block_pq2_0),
     8.0 * sizeof(block_pq2_0) / kTernaryBlockElems, Q8Layout::kPq2Planes},
    {TernaryFormat::kPtq1_0, 143, "PTQ1_0", kTernaryBlockElems, sizeof(block_ptq1_0),
     8.0 * sizeof(block_ptq1_0) / kTernaryBlockElems, Q8Layout::kPtq1Lanes},
};

static_assert(sizeof(kFormats) / sizeof(kFormats[0]) == kTernaryFormatCount);

}  // namespace

const TernaryFormatTraits& FormatTraits(TernaryFormat format) {
  return kFormats[static_cast<int>(format)];
}

const TernaryFormatTraits* FindTernaryFormat(uint32_t ggml_type) {
  for (const TernaryFormatTraits& t : kFormats) {
    if (t.ggml_type == ggml_type) return &t;
  }
  return nullptr;
}

}  // namespace walsh
