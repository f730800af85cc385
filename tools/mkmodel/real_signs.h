// Reads the released 27B prism.hadamard block from its JSON copy (docs/format.md §10 item 2).
#ifndef WALSH_TOOLS_MKMODEL_REAL_SIGNS_H_
#define WALSH_TOOLS_MKMODEL_REAL_SIGNS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace walsh {

struct ReleasedHadamard {
  int64_t block_size = 0;
  std::vector<int64_t> sign_widths;
  std::map<int64_t, std::vector<int8_t>> signs;  // unpacked from one bit per value, LSB first
  std::vector<std::string> weight_names;
  std::vector<std::string> inverse_weight_names;
  bool gdn_v_grouped = false;
};

absl::StatusOr<ReleasedHadamard> LoadReleasedHadamard(const std::string& path);

// tests/data/prism/ternary_bonsai_hadamard.json in the source tree.
std::string DefaultReleasedHadamardPath();

}  // namespace walsh

#endif  // WALSH_TOOLS_MKMODEL_REAL_SIGNS_H_
