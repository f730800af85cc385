// Checks a file's tensor table against an inventory: every expected tensor present with its shape
// and an allowed type, and no tensor beyond it. The text model's and the vision projector's checks
// (qwen35_config.cc, mmproj_config.cc) share it, so both refuse with the same words.
#ifndef WALSH_WORKER_MODEL_TENSOR_TABLE_CHECK_H_
#define WALSH_WORKER_MODEL_TENSOR_TABLE_CHECK_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_file.h"

namespace walsh {

// `Expected` has name and ne; allowed(e, type) says whether e may be stored as type, and
// allowed_types(e) names what may; `unexpected_why` ends the refusal of a tensor not expected.
template <typename Expected, typename Allowed, typename AllowedTypes>
absl::Status CheckTensorTable(const GgufFile& file, const std::vector<Expected>& inventory,
                              Allowed allowed, AllowedTypes allowed_types,
                              absl::string_view unexpected_why) {
  absl::flat_hash_set<std::string> expected_names;
  for (const Expected& e : inventory) {
    expected_names.insert(e.name);
    const GgufTensorInfo* t = file.FindTensor(e.name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("missing tensor '", e.name, "'"));
    }
    if (t->ne != e.ne) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "' has shape ",
                                                     t->ShapeString(), ", expected ",
                                                     GgufShapeString(e.ne)));
    }
    if (!allowed(e, t->type)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "' has type ",
                                                     GgmlTypeName(t->type), ", expected ",
                                                     allowed_types(e)));
    }
  }
  for (const GgufTensorInfo& t : file.tensors()) {
    if (!expected_names.contains(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected tensor '", t.name, "': ", unexpected_why));
    }
  }
  return absl::OkStatus();
}

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_TENSOR_TABLE_CHECK_H_
