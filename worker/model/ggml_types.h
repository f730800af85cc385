// The ggml tensor types walsh can size, with their block geometry (docs/format.md §1).
#ifndef WALSH_WORKER_MODEL_GGML_TYPES_H_
#define WALSH_WORKER_MODEL_GGML_TYPES_H_

#include <cstdint>
#include <string>

namespace walsh {

enum GgmlType : uint32_t {
  kGgmlF32 = 0,
  kGgmlF16 = 1,
  kGgmlQ8_0 = 8,
  kGgmlBf16 = 30,
  kGgmlPq2_0 = 142,
  kGgmlPtq1_0 = 143,
};

struct GgmlTypeInfo {
  uint32_t id;
  const char* name;
  uint32_t block_elems;  // elements per block (1 for plain floats and ints)
  uint32_t block_bytes;  // bytes per block
};

// Returns the geometry of a known type, or null: a type we cannot size is refused, never guessed.
const GgmlTypeInfo* FindGgmlType(uint32_t id);

// "PQ2_0", or "type 77" for an unknown id.
std::string GgmlTypeName(uint32_t id);

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_GGML_TYPES_H_
