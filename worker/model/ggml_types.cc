#include "worker/model/ggml_types.h"

#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/weight_format.h"

namespace walsh {
namespace {

// Sizes from ggml's type traits (ggml/src/ggml.c); the Prism types come from the ternary format
// table (kernels/weight_format.h), written once (docs/format.md §1).
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},    {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},  {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292}, {24, "I8", 1, 1},       {25, "I16", 1, 2},
    {26, "I32", 1, 4},      {27, "I64", 1, 8},      {28, "F64", 1, 8},      {30, "BF16", 1, 2},
    {34, "TQ1_0", 256, 54}, {35, "TQ2_0", 256, 66},
};

std::vector<GgmlTypeInfo> AllTypes() {
  std::vector<GgmlTypeInfo> types(std::begin(kGgmlTypes), std::end(kGgmlTypes));
  for (int i = 0; i < kTernaryFormatCount; ++i) {
    const TernaryFormatTraits& f = FormatTraits(static_cast<TernaryFormat>(i));
    types.push_back({f.ggml_type, f.name, static_cast<uint32_t>(f.block_elems),
                     static_cast<uint32_t>(f.block_bytes)});
  }
  return types;
}

}  // namespace

const GgmlTypeInfo* FindGgmlType(uint32_t id) {
  static const std::vector<GgmlTypeInfo>* const types = new std::vector<GgmlTypeInfo>(AllTypes());
  for (const GgmlTypeInfo& t : *types) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

std::string GgmlTypeName(uint32_t id) {
  const GgmlTypeInfo* t = FindGgmlType(id);
  return t != nullptr ? std::string(t->name) : absl::StrCat("type ", id);
}

}  // namespace walsh
