// Synthetic qwen35 models that satisfy the whole Prism contract: random ternary weights with
// per-128 scales drawn like a trained model's, stored in the rotated basis exactly as a
// Prism-folded file stores them, plus (for tests) the same network unfolded to dense floats.
#ifndef WALSH_TOOLS_MKMODEL_SYNTHETIC_MODEL_H_
#define WALSH_TOOLS_MKMODEL_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/weight_format.h"
#include "tools/mkmodel/presets.h"
#include "worker/model/gguf_writer.h"
#include "worker/model/prism_contract.h"

namespace walsh {

enum class SignSource { kRandom, kReal };

struct SyntheticModelOptions {
  std::string preset = "tiny";
  TernaryFormat format = TernaryFormat::kPq2_0;
  uint64_t seed = 1;
  SignSource signs = SignSource::kRandom;
  // The released 27B sign vectors (fixtures/prism/ternary_bonsai_hadamard.json); empty means
  // the copy shipped in tests/data.
  std::string real_signs_path;
  int64_t layers = 0;  // 0: the preset's layer count
  // A Hugging Face tokenizer.json whose vocabulary replaces the synthetic one (the embedding
  // and head then have its size; tokenizer.ggml.pre is "qwen2", the Qwen3 split).
  std::string tokenizer_json;
};

// Where each matmul weight's rotation comes from, as written into the file.
struct SyntheticFold {
  int64_t block_size = 0;
  std::map<int64_t, std::vector<int8_t>> signs;  // width -> ±1
  std::vector<std::string> folded_names;
  GdnPermute gdn;  // ssm_out permutation geometry (gdn_v_grouped is always true)
};

class SyntheticModel {
 public:
  static absl::StatusOr<std::unique_ptr<SyntheticModel>> Create(const SyntheticModelOptions& opts);

  const ModelPreset& preset() const { return preset_; }
  const SyntheticFold& fold() const { return fold_; }
  // Keys and tensor table of the packed file.
  const GgufWriter& writer() const { return writer_; }
  GgufWriter& mutable_writer() { return writer_; }

  // Produces the packed bytes of every tensor, in order.
  GgufWriter::TensorFiller PackedFiller() const;
  absl::Status WritePacked(const std::string& path) const;

  // The same network with every fold undone: F32 weights in the plain basis, embedding rows
  // un-rotated, no prism.hadamard keys. A reference for engine tests; refused for the 27B shape.
  absl::Status WriteDense(const std::string& path) const;

  // Decoded values of row `row` of a packed matmul weight, in the stored (rotated) basis.
  void DecodeStoredRow(const GgufTensorSpec& spec, uint64_t row, float* out) const;

 private:
  SyntheticModel() = default;

  SyntheticModelOptions opts_;
  ModelPreset preset_;
  SyntheticFold fold_;
  GgufWriter writer_;
};

}  // namespace walsh

#endif  // WALSH_TOOLS_MKMODEL_SYNTHETIC_MODEL_H_
