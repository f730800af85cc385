// The qwen35 hyper-parameters (docs/format.md §5) and the tensor inventory they imply (§4).
#ifndef WALSH_WORKER_MODEL_QWEN35_CONFIG_H_
#define WALSH_WORKER_MODEL_QWEN35_CONFIG_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/gguf_file.h"

namespace walsh {

struct Qwen35Config {
  int64_t block_count = 0;
  int64_t context_length = 0;
  int64_t embedding_length = 0;     // hidden size
  int64_t feed_forward_length = 0;  // FFN width
  int64_t head_count = 0;
  int64_t head_count_kv = 0;
  int64_t key_length = 0;
  int64_t value_length = 0;
  float rms_epsilon = 0;
  int64_t rope_dimension_count = 0;
  std::array<int64_t, 4> rope_sections = {};
  float rope_freq_base = 0;
  int64_t full_attention_interval = 0;
  int64_t ssm_conv_kernel = 0;
  int64_t ssm_state_size = 0;      // GDN head width for k and v
  int64_t ssm_group_count = 0;     // GDN key heads
  int64_t ssm_time_step_rank = 0;  // GDN value heads
  int64_t ssm_inner_size = 0;
  int64_t vocab_size = 0;  // rows of token_embd

  bool IsFullAttention(int64_t layer) const { return (layer + 1) % full_attention_interval == 0; }
  int64_t gdn_key_dim() const { return ssm_group_count * ssm_state_size; }
  int64_t gdn_conv_dim() const { return 2 * gdn_key_dim() + ssm_inner_size; }
};

// What a tensor may be stored as.
enum class TensorClass {
  kProjection,       // big matmul weights: PQ2_0, PTQ1_0, or F32/F16/BF16
  kDenseProjection,  // small unfolded projections (ssm_alpha/beta): F32, F16 or BF16
  kF32,              // norms, conv taps, gates: F32 only
};

struct ExpectedTensor {
  std::string name;
  std::vector<uint64_t> ne;
  TensorClass cls;
};

// Parses and checks the qwen35.* keys. `general.architecture` must be "qwen35"; keys that
// would change the math and that walsh does not implement (MTP layers, explicit recurrent
// layer lists, RoPE scaling) are refused by name. vocab_size is taken from token_embd.
absl::StatusOr<Qwen35Config> ParseQwen35Config(const GgufFile& file);

// The tensors a qwen35 file with this config holds, in file order. `with_output` is false for
// a tied head (prism.hadamard.tied_output).
std::vector<ExpectedTensor> Qwen35Inventory(const Qwen35Config& config, bool with_output);

// Checks the file's tensor table against the inventory: every tensor present with its shape
// and an allowed type, and no tensor the architecture does not know.
absl::Status CheckQwen35Inventory(const GgufFile& file, const Qwen35Config& config,
                                  bool with_output);

// Writes the config's keys (qwen35.* and general.architecture) in the layout docs/format.md §5
// gives.
class GgufWriter;
void WriteQwen35Config(const Qwen35Config& config, GgufWriter& writer);

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_QWEN35_CONFIG_H_
