#include "worker/engine/cpu_backend.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/hadamard_ref.h"
#include "kernels/ternary_block_decode.h"
#include "worker/engine/rope_table.h"

namespace walsh {

CpuBackend::CpuBackend(const Model& model, const CpuBackendOptions& options)
    : model_(model),
      options_(options),
      pool_(options.threads),
      rope_inv_freq_(RopeInverseFrequencies(model.config().rope_dimension_count,
                                            model.config().rope_freq_base)) {
  if (options.tp > 1) {
    comm_ = std::make_unique<CpuCommunicator>(options.tp);
    shards_ = std::make_unique<ShardPlan>(ShardPlan::Build(model.file(), options.tp));
    ranks_ = std::make_unique<CpuRankGroup>(options.tp, comm_.get(), options.collective_timeout,
                                            options.debug_stall_rank);
  }
}

BackendMemory CpuBackend::Memory() const {
  const int64_t f = sizeof(float);
  return {0, 0, 0, geometry_.pages * geometry_.page_floats() * f,
          geometry_.slots * geometry_.slot_floats() * f};
}

absl::Status CpuBackend::AllocateCaches(const CacheGeometry& g) {
  geometry_ = g;
  kv_.reset(static_cast<float*>(
      std::calloc(static_cast<size_t>(g.pages * g.page_floats()), sizeof(float))));
  state_.reset(static_cast<float*>(
      std::calloc(static_cast<size_t>(g.slots * g.slot_floats()), sizeof(float))));
  if (kv_ == nullptr || state_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", g.pages * g.page_floats() * 4, " bytes of KV cache and ",
                     g.slots * g.slot_floats() * 4, " bytes of recurrent state"));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ClearStateSlot(int32_t slot) {
  float* begin = state_.get() + slot * geometry_.slot_floats();
  std::fill(begin, begin + geometry_.slot_floats(), 0.0f);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CpuBackend::Activation(Buffer id, int64_t rows, int64_t cols) {
  std::vector<float>& b = buffers_[static_cast<int>(id)];
  if (static_cast<int64_t>(b.size()) < rows * cols) b.resize(rows * cols);
  return Tensor{b.data(), rows, cols};
}

absl::StatusOr<Q8Tensor> CpuBackend::Quantized(int index, int64_t rows, int64_t cols,
                                               Q8Layout layout) {
  std::vector<Q8Block128>& b = quantized_[index];
  const int64_t blocks = rows * (cols / kTernaryBlockElems);
  if (static_cast<int64_t>(b.size()) < blocks) b.resize(blocks);
  return Q8Tensor{b.data(), rows, cols, layout};
}

absl::Status CpuBackend::BeginStep(const StepPlan& plan) {
  plan_ = plan;
  return absl::OkStatus();
}

absl::Status CpuBackend::Embed(const TernaryWeights& table, bool rotated, const int8_t* signs,
                               Tensor out) {
  const int64_t h = table.cols, nb = table.blocks_per_row();
  for (int64_t t = 0; t < out.rows; ++t) {
    const uint8_t* row = table.data + plan_.tokens[t] * table.row_bytes();
    float* o = out.data + t * h;
    for (int64_t b = 0; b < nb; ++b) {
      for (int j = 0; j < kTernaryBlockElems; ++j) {
        o[b * kTernaryBlockElems + j] = DequantizeTernary(table.format, row, b, j);
      }
    }
    if (rotated) {
      SignedFwhtInverse(options_.isa, o, signs, h, model_.contract().block_size, o);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::RmsNorm(Tensor x, const float* weight, float eps, Tensor out) {
  for (int64_t t = 0; t < x.rows; ++t) {
    ::walsh::RmsNorm(x.data + t * x.cols, weight, x.cols, eps, out.data + t * x.cols);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::GatherLogitRows(Tensor x, Tensor out) {
  for (size_t i = 0; i < plan_.logit_tokens.size(); ++i) {
    std::memcpy(out.data + i * x.cols, x.data + plan_.logit_tokens[i] * x.cols,
                x.cols * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::AddInPlace(Tensor acc, Tensor x) {
  for (int64_t i = 0; i < acc.rows * acc.cols; ++i) acc.data[i] += x.data[i];
  return absl::OkStatus();
}

absl::Status CpuBackend::SwiGlu(Tensor gate, Tensor up, Tensor out) {
  ::walsh::SwiGlu(gate.data, up.data, gate.rows * gate.cols, out.data);
  return absl::OkStatus();
}

const float* CpuBackend::PermutedRow(const float* row, Transform t, float* scratch) const {
  if (t != Transform::kPermutedRotated) return row;
  const GdnPermute& g = model_.contract().gdn;
  GdnPermuteRef(row, g.n_k, g.rep, g.hd, scratch);
  return scratch;
}

absl::Status CpuBackend::Rotate(Tensor x, Transform t, const int8_t* signs, Tensor out) {
  const int64_t w = x.cols, block = model_.contract().block_size;
  std::vector<float> permuted(t == Transform::kPermutedRotated ? w : 0);
  for (int64_t i = 0; i < x.rows; ++i) {
    const float* row = x.data + i * w;
    if (t == Transform::kPlain) {
      std::memcpy(out.data + i * w, row, w * sizeof(float));
      continue;
    }
    SignedFwhtForward(options_.isa, PermutedRow(row, t, permuted.data()), signs, w, block,
                      out.data + i * w);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::RotateQuantize(Tensor x, Transform t, const int8_t* signs, Q8Tensor out) {
  const int64_t w = x.cols, block = model_.contract().block_size, nb = w / kTernaryBlockElems;
  std::vector<float> permuted(t == Transform::kPermutedRotated ? w : 0), rotated(w);
  for (int64_t i = 0; i < x.rows; ++i) {
    const float* row = x.data + i * w;
    if (t != Transform::kPlain) {
      SignedFwhtForward(options_.isa, PermutedRow(row, t, permuted.data()), signs, w, block,
                        rotated.data());
      row = rotated.data();
    }
    QuantizeRowQ8(row, w, out.layout, out.data + i * nb);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::SplitRows(const Projection& p,
                                   const std::function<void(int64_t, int64_t)>& rows_fn) {
  if (ranks_ != nullptr) {
    const WeightShards* shards = shards_->Find(p.name);
    if (shards == nullptr) {
      return absl::InternalError(absl::StrCat("no shard plan for '", p.name, "'"));
    }
    return ranks_->Run([&](int rank) {
      const RowRange r = shards->ranks[rank];
      if (r.size() != 0) rows_fn(r.begin, r.end);
    });
  }
  const int64_t rows = p.w.rows;
  const int64_t grain = std::max<int64_t>(8, rows / (pool_.threads() * 8));
  pool_.ParallelFor(rows, grain, rows_fn);
  return absl::OkStatus();
}

absl::Status CpuBackend::MatMul(const Projection& p, Q8Tensor x, Tensor y) {
  return SplitRows(p, [&](int64_t r0, int64_t r1) {
    TernaryMatMulQ8(options_.isa, p.w, x.data, x.rows, y.data, p.w.rows, r0, r1);
  });
}

absl::Status CpuBackend::MatMulF32(const Projection& p, Tensor x, Tensor y) {
  return SplitRows(p, [&](int64_t r0, int64_t r1) {
    TernaryMatMulF32(p.w, x.data, x.rows, y.data, p.w.rows, r0, r1);
  });
}

absl::Status CpuBackend::DenseProject(const DenseWeight& w, Tensor x, Tensor y,
                                      int64_t col_offset) {
  for (int64_t t = 0; t < x.rows; ++t) {
    DenseMatVec(w.format, w.data, w.rows, w.cols, x.data + t * x.cols,
                y.data + t * y.cols + col_offset);
  }
  return absl::OkStatus();
}

float* CpuBackend::KvLayer(int64_t layer) const {
  return kv_.get() + layer * 2 * geometry_.page_size * geometry_.kv_dim;
}

float* CpuBackend::StateLayer(int32_t slot, int64_t layer) const {
  return state_.get() + slot * geometry_.slot_floats() +
         layer * (geometry_.conv_floats + geometry_.recurrent_floats);
}

absl::Status CpuBackend::AttentionPrepare(const AttentionWeights& w, int64_t layer, Tensor q_gate,
                                          Tensor k, Tensor v) {
  const Qwen35Config& c = model_.config();
  const int64_t hd = c.key_length, nh = c.head_count, nkv = c.head_count_kv;
  const int64_t kv_dim = nkv * hd, page = geometry_.page_size;
  float* k_layer = KvLayer(layer);
  float* v_layer = k_layer + page * kv_dim;
  for (int64_t t = 0; t < q_gate.rows; ++t) {
    const int64_t pos = plan_.pos_of_token[t];
    float* qg = q_gate.data + t * q_gate.cols;
    for (int64_t j = 0; j < nh; ++j) {
      float* q = qg + j * 2 * hd;
      ::walsh::RmsNorm(q, w.q_norm, hd, c.rms_epsilon, q);
      RopeNeoxInPlace(q, c.rope_dimension_count, pos, rope_inv_freq_.data());
    }
    float* kt = k.data + t * kv_dim;
    for (int64_t m = 0; m < nkv; ++m) {
      ::walsh::RmsNorm(kt + m * hd, w.k_norm, hd, c.rms_epsilon, kt + m * hd);
      RopeNeoxInPlace(kt + m * hd, c.rope_dimension_count, pos, rope_inv_freq_.data());
    }
    const int32_t pg = plan_.seq_pages[plan_.seq_of_token[t]][pos / page];
    const int64_t at = pg * geometry_.page_floats() + (pos % page) * kv_dim;
    std::memcpy(k_layer + at, kt, kv_dim * sizeof(float));
    std::memcpy(v_layer + at, v.data + t * kv_dim, kv_dim * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Attention(int64_t layer, Tensor q_gate, Tensor out) {
  const Qwen35Config& c = model_.config();
  const int64_t hd = c.key_length, nh = c.head_count, nkv = c.head_count_kv;
  const int64_t kv_dim = nkv * hd, group = nh / nkv, page = geometry_.page_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* k_layer = KvLayer(layer);
  // Every (token, head) pair in parallel: each reduces over its keys in position order on one
  // thread, so the thread count never changes a bit.
  pool_.ParallelFor(q_gate.rows * nh, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / nh, j = th % nh, pos = plan_.pos_of_token[t];
      scores.resize(pos + 1);
      const float* q = q_gate.data + t * q_gate.cols + j * 2 * hd;
      const float* g = q + hd;
      float* u = out.data + t * out.cols + j * hd;
      const PagedKv kv{k_layer,
                       k_layer + page * kv_dim,
                       plan_.seq_pages[plan_.seq_of_token[t]].data(),
                       geometry_.page_floats(),
                       page,
                       kv_dim,
                       (j / group) * hd};  // blocked GQA
      AttendOneHead(q, hd, kv, pos + 1, scale, scores.data(), u);
      for (int64_t i = 0; i < hd; ++i) u[i] *= Sigmoid(g[i]);
    }
  });
  return absl::OkStatus();
}

GdnLayerParams CpuBackend::GdnParams(const GdnWeights& w) const {
  const Qwen35Config& c = model_.config();
  return {c.ssm_group_count,
          c.ssm_time_step_rank,
          c.ssm_state_size,
          c.ssm_conv_kernel,
          w.conv,
          w.ssm_a,
          w.dt_bias,
          w.norm,
          c.rms_epsilon};
}

absl::Status CpuBackend::GdnConv(const GdnWeights& w, int64_t layer, Tensor qkv, Tensor u) {
  const GdnLayerParams params = GdnParams(w);
  for (int64_t t = 0; t < qkv.rows; ++t) {
    const int32_t slot = plan_.seq_slots[plan_.seq_of_token[t]];
    GdnConvStep(params, qkv.data + t * qkv.cols, StateLayer(slot, layer), u.data + t * u.cols);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::GdnRecurrence(const GdnWeights& w, int64_t layer, Tensor u, Tensor z,
                                       Tensor alpha_beta, Tensor out) {
  const GdnLayerParams params = GdnParams(w);
  // The recurrence runs token by token; within a token the value heads are independent.
  for (int64_t t = 0; t < u.rows; ++t) {
    const int32_t slot = plan_.seq_slots[plan_.seq_of_token[t]];
    float* S = StateLayer(slot, layer) + geometry_.conv_floats;
    const float* alpha = alpha_beta.data + t * alpha_beta.cols;
    const float* beta = alpha + params.n_v;
    const float* ut = u.data + t * u.cols;
    const float* zt = z.data + t * z.cols;
    float* o = out.data + t * out.cols;
    pool_.ParallelFor(params.n_v, 1, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) GdnHeadStep(params, ut, zt, alpha, beta, h, S, o);
    });
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ReadToHost(Tensor x, float* host) {
  std::memcpy(host, x.data, x.rows * x.cols * sizeof(float));
  return absl::OkStatus();
}

}  // namespace walsh
