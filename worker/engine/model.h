// A validated model file bound to packed weight views: no weight is copied, the mmap is the
// storage. Every projection carries the activation transform its weights were folded with.
#ifndef WALSH_WORKER_ENGINE_MODEL_H_
#define WALSH_WORKER_ENGINE_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/ternary_weights.h"
#include "kernels/token_ops.h"
#include "worker/model/model_file.h"

namespace walsh {

// A ternary matmul weight and the transform its input must get (docs/format.md §7.2).
struct Projection {
  std::string name;
  TernaryWeights w;
  bool folded = false;            // input = T(s ⊙ P(x)) instead of x
  bool gdn_permute = false;       // P is the tiled -> grouped value-head permutation
  const int8_t* signs = nullptr;  // for width w.cols; null in identity sign mode
};

struct DenseWeight {  // small unfolded projections (ssm_alpha / ssm_beta)
  DenseFormat format = DenseFormat::kF32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
};

struct AttentionWeights {
  Projection q, k, v, o;  // q holds query and output gate, alternating per head
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
};

struct GdnWeights {
  Projection qkv, gate, out;
  DenseWeight alpha, beta;
  const float* conv = nullptr;  // [conv_dim][conv_kernel]
  const float* ssm_a = nullptr;
  const float* dt_bias = nullptr;
  const float* norm = nullptr;
};

struct LayerWeights {
  bool full_attention = false;
  int64_t cache_index = 0;  // index among attention layers, or among GDN layers
  const float* attn_norm = nullptr;
  const float* post_attention_norm = nullptr;
  AttentionWeights attn;
  GdnWeights gdn;
  Projection ffn_gate, ffn_up, ffn_down;
};

class Model {
 public:
  // Binds every tensor; refuses a tensor type the engine has no kernel for, naming it.
  static absl::StatusOr<std::unique_ptr<Model>> Bind(ModelFile file);

  const Qwen35Config& config() const { return file_.config; }
  const PrismContract& contract() const { return file_.contract; }
  const GgufFile& gguf() const { return *file_.gguf; }
  const ModelFile& file() const { return file_; }

  const TernaryWeights& token_embd() const { return token_embd_; }
  bool embd_rotated() const { return embd_rotated_; }  // rows stored as T(s ⊙ e)
  const int8_t* embd_signs() const { return embd_signs_; }
  const Projection& output() const { return output_; }
  const float* output_norm() const { return output_norm_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  int64_t attention_layers() const { return n_attention_; }
  int64_t gdn_layers() const { return n_gdn_; }

 private:
  explicit Model(ModelFile file) : file_(std::move(file)) {}
  absl::StatusOr<Projection> BindProjection(const std::string& name) const;

  ModelFile file_;
  TernaryWeights token_embd_;
  bool embd_rotated_ = false;
  const int8_t* embd_signs_ = nullptr;
  Projection output_;
  const float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  int64_t n_attention_ = 0, n_gdn_ = 0;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_MODEL_H_
