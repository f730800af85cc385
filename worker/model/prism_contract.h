// The prism.hadamard.* activation-transform contract (docs/format.md §6, §12): parsed, validated
// against the tensor table, and turned into what the engine needs per weight.
#ifndef WALSH_WORKER_MODEL_PRISM_CONTRACT_H_
#define WALSH_WORKER_MODEL_PRISM_CONTRACT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "worker/model/gguf_file.h"

namespace walsh {

inline constexpr char kPrismTransform[] = "normalized-sylvester-walsh-hadamard";
inline constexpr char kPrismAxis[] = "input-last-dimension";

enum class PrismSignMode { kExplicit, kIdentity };

// Geometry of the tiled -> grouped value-head permutation of a GDN ssm_out input (§7.3).
struct GdnPermute {
  int64_t n_k = 0;  // key heads (ssm.group_count)
  int64_t rep = 0;  // value heads per key head
  int64_t hd = 0;   // head width
};

struct FoldedWeight {
  std::string name;
  int64_t width = 0;         // ne[0]: the input width the rotation acts on
  bool gdn_permute = false;  // ssm_out with gdn_v_grouped
};

struct PrismContract {
  int64_t version = 0;
  bool tied_output = false;
  int64_t block_size = 0;
  PrismSignMode sign_mode = PrismSignMode::kExplicit;
  bool gdn_v_grouped = false;
  std::vector<int64_t> sign_widths;              // in file order; empty for identity
  std::map<int64_t, std::vector<int8_t>> signs;  // width -> ±1 per element
  std::vector<FoldedWeight> folded;              // in file order
  std::vector<std::string> inverse;              // rotated lookup tables (token_embd)
  GdnPermute gdn;                                // set when gdn_v_grouped

  const FoldedWeight* FindFolded(const std::string& name) const;
  bool IsInverse(const std::string& name) const;
  // The sign vector for `width`, or null in identity mode (all +1).
  const int8_t* SignsFor(int64_t width) const;

 private:
  friend absl::StatusOr<PrismContract> ParsePrismContract(const GgufFile&, int64_t, int64_t);
  absl::flat_hash_map<std::string, size_t> folded_index_;
};

// Parses and checks every rule; an error names the key or tensor and the value refused.
// `gdn_group_count` and `gdn_value_heads` are ssm.group_count and ssm.time_step_rank.
absl::StatusOr<PrismContract> ParsePrismContract(const GgufFile& file, int64_t gdn_group_count,
                                                 int64_t gdn_value_heads);

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_PRISM_CONTRACT_H_
