#include "worker/engine/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/hadamard_ref.h"
#include "kernels/ternary_block_decode.h"
#include "worker/engine/product_builder.h"
#include "worker/engine/rope_table.h"

namespace walsh {
namespace {

// The CPU kernels read rows as the file lays them out; only the CUDA backend repacks its own
// copy (kernels/ternary_lanes_layout.h), so any other layout here is a bug upstream.
absl::Status RequireFileLayout(const TernaryWeights& w, const char* what) {
  if (w.layout == TernaryLayout::kFile) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("cpu: ", what, " weights in the lanes layout (only the CUDA backend reads it)"));
}

}  // namespace

CpuBackend::CpuBackend(const Model& model, const CpuBackendOptions& options)
    : model_(model),
      options_(options),
      pool_(options.threads),
      rope_inv_freq_(RopeInverseFrequencies(model.config().rope_dimension_count,
                                            model.config().rope_freq_base)),
      rope_stream_of_pair_(
          RopeStreamOfPair(model.config().rope_dimension_count, model.config().rope_sections)) {}

BackendMemory CpuBackend::Memory() const {
  const int64_t f = sizeof(float);
  return {0, 0, 0, geometry_.pages * geometry_.page_bytes(),
          geometry_.slots * geometry_.slot_floats() * f};
}

absl::Status CpuBackend::AllocateCaches(const CacheGeometry& g) {
  geometry_ = g;
  // Both are walked every step, as the weights are: huge pages where THP allows them.
  ASSIGN_OR_RETURN(kv_, ZeroedPages::Map(static_cast<size_t>(g.pages * g.page_bytes()), "KV cache",
                                         ZeroedPages::Pages::kHuge));
  ASSIGN_OR_RETURN(state_,
                   ZeroedPages::Map(static_cast<size_t>(g.slots * g.slot_floats()) * sizeof(float),
                                    "recurrent state", ZeroedPages::Pages::kHuge));
  return absl::OkStatus();
}

absl::Status CpuBackend::ClearStateSlot(int32_t slot) {
  float* begin = StateBase() + slot * geometry_.slot_floats();
  std::fill(begin, begin + geometry_.slot_floats(), 0.0f);
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyStateSlot(int32_t from, int32_t to) {
  const int64_t n = geometry_.slot_floats();
  std::copy_n(StateBase() + from * n, n, StateBase() + to * n);
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyKvPage(int32_t from, int32_t to) {
  const int64_t n = geometry_.page_bytes();
  std::memcpy(kv_.data() + to * n, kv_.data() + from * n, static_cast<size_t>(n));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CpuBackend::Activation(int slot, int64_t rows, int64_t cols, DType dtype,
                                              Q8Layout layout) {
  ASSIGN_OR_RETURN(const int64_t bytes, ActivationBytes(slot, rows, cols, dtype));
  SlotMemory& m = slots_[slot];
  if (m.bytes < bytes) {
    // Views handed out earlier in the step keep the old memory until the step ends.
    const int64_t size = (bytes + bytes / 4 + 63) / 64 * 64;
    void* fresh = std::aligned_alloc(64, static_cast<size_t>(size));
    if (fresh == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("activation slot ", slot, ": cannot allocate ", size, " bytes"));
    }
    if (m.memory != nullptr) retired_.push_back(std::move(m));
    m.memory.reset(fresh);
    m.bytes = size;
  }
  return Tensor{m.memory.get(), rows, cols, dtype, layout};
}

absl::Status CpuBackend::BeginStep(const StepPlan& plan) {
  retired_.clear();
  plan_ = plan;
  return absl::OkStatus();
}

absl::Status CpuBackend::Embed(const TernaryWeights& table, bool rotated, const int8_t* signs,
                               Tensor out) {
  ScopedOpTime timer(options_.profile, "embed");
  RETURN_IF_ERROR(RequireFileLayout(table, "embedding"));
  const int64_t h = table.cols, nb = table.blocks_per_row();
  for (int64_t t = 0; t < out.rows; ++t) {
    float* o = out.f32() + t * h;
    if (!plan_.embedding_of_token.empty() && plan_.embedding_of_token[t] >= 0) {
      const float* image_row = plan_.embedding_rows->data() + plan_.embedding_of_token[t] * h;
      std::copy(image_row, image_row + h, o);
      continue;
    }
    const uint8_t* row = table.data + plan_.tokens[t] * table.row_bytes();
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
  ScopedOpTime timer(options_.profile, "rmsnorm");
  for (int64_t t = 0; t < x.rows; ++t) {
    ::walsh::RmsNorm(x.f32() + t * x.cols, weight, x.cols, eps, out.f32() + t * x.cols);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::GatherLogitRows(Tensor x, Tensor out) {
  ScopedOpTime timer(options_.profile, "copies");
  for (size_t i = 0; i < plan_.logit_tokens.size(); ++i) {
    std::memcpy(out.f32() + i * x.cols, x.f32() + plan_.logit_tokens[i] * x.cols,
                x.cols * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::AddInPlace(Tensor acc, Tensor x) {
  ScopedOpTime timer(options_.profile, "residual add");
  for (int64_t i = 0; i < acc.rows * acc.cols; ++i) acc.f32()[i] += x.f32()[i];
  return absl::OkStatus();
}

absl::Status CpuBackend::SwiGlu(Tensor gate, Tensor up, Tensor out) {
  ScopedOpTime timer(options_.profile, "swiglu");
  const int64_t n = gate.rows * gate.cols;
  pool_.ParallelFor(n, 4096, [&](int64_t begin, int64_t end) {
    SwiGluFast(options_.isa, gate.f32() + begin, up.f32() + begin, end - begin, out.f32() + begin);
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::Rotate(Tensor x, Transform t, const int8_t* signs, Tensor out) {
  if (out.dtype == DType::kQ8) return RotateQuantize(x, t, signs, out);
  ScopedOpTime timer(options_.profile, "rotate");
  if (t == Transform::kPermutedRotated) {
    return absl::InternalError("the GatedDeltaNet permutation is applied by its producer");
  }
  const int64_t w = x.cols, block = model_.contract().block_size;
  pool_.ParallelFor(x.rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      if (t == Transform::kPlain) {
        std::memcpy(out.f32() + i * w, x.f32() + i * w, w * sizeof(float));
      } else {
        SignedFwhtForward(options_.isa, x.f32() + i * w, signs, w, block, out.f32() + i * w);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::RotateQuantize(Tensor x, Transform t, const int8_t* signs, Tensor out) {
  ScopedOpTime timer(options_.profile, "rotate + quantize");
  if (t == Transform::kPermutedRotated) {
    return absl::InternalError("the GatedDeltaNet permutation is applied by its producer");
  }
  const int64_t w = x.cols, block = model_.contract().block_size, nb = w / kTernaryBlockElems;
  // Rotation blocks and quantization blocks are independent: pieces of whole ones (both powers
  // of two, so the larger is a multiple of the smaller) go to the pool, so even one token's row
  // fills every core.
  const int64_t unit = std::max<int64_t>(block, kTernaryBlockElems);
  const int64_t piece = w % unit == 0 ? unit : w;
  const int64_t pieces = w / piece;
  pool_.ParallelFor(x.rows * pieces, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> rotated;
    rotated.resize(piece);
    for (int64_t k = begin; k < end; ++k) {
      const int64_t i = k / pieces, c0 = k % pieces * piece;
      const float* in = x.f32() + i * w + c0;
      if (t == Transform::kRotated) {
        SignedFwhtForward(options_.isa, in, signs != nullptr ? signs + c0 : nullptr, piece, block,
                          rotated.data());
        in = rotated.data();
      }
      QuantizeRowQ8Fast(options_.isa, in, piece, out.layout,
                        out.q8() + i * nb + c0 / kTernaryBlockElems);
    }
  });
  return absl::OkStatus();
}

void CpuBackend::Run(const TernaryProduct& product, int64_t rows, bool f32) {
  const int64_t grain = std::max<int64_t>(8, rows / (pool_.threads() * 8));
  pool_.ParallelFor(rows, grain, [&](int64_t r0, int64_t r1) {
    if (f32) {
      TernaryMatMulF32(product, r0, r1);
    } else {
      TernaryMatMulQ8(options_.isa, product, r0, r1);
    }
  });
}

absl::Status CpuBackend::MatMul(const Projection& p, Tensor x, const RowSelection& rows, Tensor y) {
  const bool f32 = x.dtype == DType::kF32;
  ScopedOpTime timer(options_.profile, f32 ? "ternary product (fp32)" : "ternary product");
  RETURN_IF_ERROR(RequireFileLayout(p.w, "product"));
  TernaryProduct product = ColumnParallelProduct(p, rows, x.rows, y);
  SetProductInput(x, &product);
  Run(product, rows.count(), f32);
  return absl::OkStatus();
}

absl::Status CpuBackend::MatMulSlices(const Projection& p, Tensor x, int64_t x_first_col,
                                      const std::vector<Span>& slices,
                                      const std::vector<Tensor>& partials) {
  const bool f32 = x.dtype == DType::kF32;
  ScopedOpTime timer(options_.profile, f32 ? "ternary product (fp32)" : "ternary product");
  RETURN_IF_ERROR(RequireFileLayout(p.w, "product"));
  ASSIGN_OR_RETURN(TernaryProduct product,
                   SliceProduct(p, x.rows, x_first_col, x.cols, slices, partials));
  SetProductInput(x, &product);
  Run(product, p.w.rows, f32);
  return absl::OkStatus();
}

absl::Status CpuBackend::TreeSum(const std::vector<Tensor>& leaves, Tensor out) {
  ScopedOpTime timer(options_.profile, "slice tree sum");
  const size_t n = leaves.size();
  if (n == 0 || (n & (n - 1)) != 0) return absl::InternalError("tree over a non-power of two");
  const int64_t count = out.rows * out.cols;
  if (n == 1) {
    std::memcpy(out.f32(), leaves[0].f32(), count * sizeof(float));
    return absl::OkStatus();
  }
  // Level by level over whole rows: every element still joins its leaves in the same pairs.
  std::vector<float>& level = tree_scratch_;
  level.resize(n / 2 * count);
  auto node = [&](size_t l) { return level.data() + l * count; };
  for (size_t l = 0; l < n / 2; ++l) {
    const float* a = leaves[2 * l].f32();
    const float* b = leaves[2 * l + 1].f32();
    float* o = n == 2 ? out.f32() : node(l);
    for (int64_t i = 0; i < count; ++i) o[i] = a[i] + b[i];
  }
  for (size_t width = n / 2; width > 1; width /= 2) {
    for (size_t l = 0; l < width / 2; ++l) {
      const float* a = node(2 * l);
      const float* b = node(2 * l + 1);
      float* o = width == 2 ? out.f32() : node(l);
      for (int64_t i = 0; i < count; ++i) o[i] = a[i] + b[i];
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::DenseProject(const DenseWeight& w, Tensor x, const RowSelection& rows,
                                      Tensor y, int64_t col_offset) {
  ScopedOpTime timer(options_.profile, "dense (ssm_alpha, ssm_beta)");
  const int64_t n = rows.count();
  std::vector<int64_t>& index = dense_rows_;
  index.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    index[i] = rows.index != nullptr ? (*rows.index)[i] : rows.begin + i;
  }
  // Groups of eight tokens run as the eight lanes of a vector (AVX2); the rest, every (token,
  // run of 8 rows) in parallel, so one token's rows alone fill both cores.
  constexpr int64_t kRun = 8;
  const int64_t t_vec = HasDenseRowsDot8Tokens(options_.isa) ? x.rows / 8 * 8 : 0;
  const int64_t runs = (n + kRun - 1) / kRun;
  pool_.ParallelFor(t_vec / 8 * runs, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t t = k / runs * 8, r0 = k % runs * kRun, m = std::min(kRun, n - r0);
      DenseRowsDot8Tokens(options_.isa, w.format, w.data, index.data() + r0, m, w.cols,
                          x.f32() + t * x.cols, x.cols, y.f32() + t * y.cols + col_offset + r0,
                          y.cols);
    }
  });
  pool_.ParallelFor((x.rows - t_vec) * runs, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t t = t_vec + k / runs, r0 = k % runs * kRun, m = std::min(kRun, n - r0);
      DenseRowsDot(w.format, w.data, index.data() + r0, m, w.cols, x.f32() + t * x.cols,
                   y.f32() + t * y.cols + col_offset + r0);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyColumns(Tensor x, int64_t col_begin, Tensor out) {
  ScopedOpTime timer(options_.profile, "copies");
  if (out.cols == 0) return absl::OkStatus();  // a rank with no share (memcpy wants pointers)
  for (int64_t t = 0; t < x.rows; ++t) {
    std::memcpy(out.f32() + t * out.cols, x.f32() + t * x.cols + col_begin, out.cols * 4);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::PlaceColumns(Tensor x, Tensor out, int64_t col_begin) {
  ScopedOpTime timer(options_.profile, "copies");
  if (x.cols == 0) return absl::OkStatus();
  for (int64_t t = 0; t < x.rows; ++t) {
    std::memcpy(out.f32() + t * out.cols + col_begin, x.f32() + t * x.cols, x.cols * 4);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Ungroup(Tensor x, int64_t n_k, int64_t rep, int64_t hd, Tensor out) {
  ScopedOpTime timer(options_.profile, "gdn ungroup");
  for (int64_t t = 0; t < x.rows; ++t) {
    GdnUnpermuteRef(x.f32() + t * x.cols, n_k, rep, hd, out.f32() + t * out.cols);
  }
  return absl::OkStatus();
}

template <typename T>
T* CpuBackend::KvLayer(int64_t layer) const {
  return reinterpret_cast<T*>(kv_.data()) +
         layer * 2 * geometry_.page_size * geometry_.kv_row_units();
}

// Runs f with a null pointer of the KV pages' unit type.
template <typename F>
absl::Status WithKvUnit(KvCacheDtype dtype, const F& f) {
  switch (dtype) {
    case KvCacheDtype::kFp16:
      return f(static_cast<uint16_t*>(nullptr));
    case KvCacheDtype::kQ8:
      return f(static_cast<KvQ8*>(nullptr));
    case KvCacheDtype::kQ4:
      return f(static_cast<KvQ4*>(nullptr));
    case KvCacheDtype::kF32:
      break;
  }
  return f(static_cast<float*>(nullptr));
}

float* CpuBackend::StateLayer(int32_t slot, int64_t layer) const {
  return StateBase() + slot * geometry_.slot_floats() +
         layer * (geometry_.conv_floats + geometry_.recurrent_floats);
}

absl::Status CpuBackend::AttentionPrepare(const AttentionWeights& w, int64_t layer,
                                          const AttentionShard& heads, Tensor q_gate, Tensor k,
                                          Tensor v) {
  ScopedOpTime timer(options_.profile, "attention (norm, rope, kv store)");
  return WithKvUnit(geometry_.kv_dtype, [&](auto* unit) {
    return Prepare<std::remove_pointer_t<decltype(unit)>>(w, layer, heads, q_gate, k, v);
  });
}

template <typename T>
absl::Status CpuBackend::Prepare(const AttentionWeights& w, int64_t layer,
                                 const AttentionShard& heads, Tensor q_gate, Tensor k, Tensor v) {
  const Qwen35Config& c = model_.config();
  const int64_t hd = c.key_length, kv_dim = heads.kv_heads * hd, page = geometry_.page_size;
  const int64_t row_units = geometry_.kv_row_units();
  T* k_layer = KvLayer<T>(layer);
  T* v_layer = k_layer + page * row_units;
  for (int64_t t = 0; t < q_gate.rows; ++t) {
    const int64_t pos = plan_.pos_of_token[t];
    const int32_t* streams = plan_.rope_of_token.empty() ? nullptr : &plan_.rope_of_token[3 * t];
    const auto rope = [&](float* head) {
      if (streams == nullptr) {
        RopeNeoxInPlace(head, c.rope_dimension_count, pos, rope_inv_freq_.data());
      } else {
        const int32_t four[4] = {streams[0], streams[1], streams[2], 0};
        RopeStreamsInPlace(head, c.rope_dimension_count, four, rope_stream_of_pair_.data(),
                           rope_inv_freq_.data());
      }
    };
    float* qg = q_gate.f32() + t * q_gate.cols;
    for (int64_t j = 0; j < heads.q_heads; ++j) {
      float* q = qg + j * 2 * hd;
      ::walsh::RmsNorm(q, w.q_norm, hd, c.rms_epsilon, q);
      rope(q);
    }
    float* kt = k.f32() + t * kv_dim;
    for (int64_t m = 0; m < heads.kv_heads; ++m) {
      ::walsh::RmsNorm(kt + m * hd, w.k_norm, hd, c.rms_epsilon, kt + m * hd);
      rope(kt + m * hd);
    }
    const int32_t pg = plan_.seq_pages[plan_.seq_of_token[t]][pos / page];
    const int64_t at = pg * geometry_.page_units() + (pos % page) * row_units;
    KvStoreRow(kt, kv_dim, k_layer + at);
    KvStoreRow(v.f32() + t * kv_dim, kv_dim, v_layer + at);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Attention(int64_t layer, const AttentionShard& heads, Tensor q_gate,
                                   Tensor out) {
  ScopedOpTime timer(options_.profile, "attention");
  return WithKvUnit(geometry_.kv_dtype, [&](auto* unit) {
    return Attend<std::remove_pointer_t<decltype(unit)>>(layer, heads, q_gate, out);
  });
}

template <typename T>
absl::Status CpuBackend::Attend(int64_t layer, const AttentionShard& heads, Tensor q_gate,
                                Tensor out) {
  const Qwen35Config& c = model_.config();
  const int64_t hd = c.key_length, group = c.head_count / c.head_count_kv;
  const int64_t nh = heads.q_heads, page = geometry_.page_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const T* k_layer = KvLayer<T>(layer);
  // Every (token, head) pair in parallel: each reduces over its keys in position order on one
  // thread, so the thread count never changes a bit.
  pool_.ParallelFor(q_gate.rows * nh, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / nh, j = th % nh, pos = plan_.pos_of_token[t];
      scores.resize(pos + 1);
      const float* q = q_gate.f32() + t * q_gate.cols + j * 2 * hd;
      const float* g = q + hd;
      float* u = out.f32() + t * out.cols + j * hd;
      const int64_t kv_head = (heads.q_head_begin + j) / group - heads.kv_head_begin;  // GQA
      const PagedKv<T> kv{k_layer,
                          k_layer + page * geometry_.kv_row_units(),
                          plan_.seq_pages[plan_.seq_of_token[t]].data(),
                          geometry_.page_units(),
                          page,
                          geometry_.kv_row_units(),
                          kv_head * hd / KvValuesPerUnit<T>};
      AttendOneHeadFast(options_.isa, q, hd, kv, pos + 1, scale, scores.data(), u);
      for (int64_t i = 0; i < hd; ++i) u[i] *= Sigmoid(g[i]);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::GdnConv(const GdnLayerParams& p, int64_t layer, Tensor qkv, Tensor u) {
  ScopedOpTime timer(options_.profile, "gdn conv");
  // Channels are independent: each thread takes a range of them through every token in order
  // (so each channel's window shifts as one token at a time would shift it), then the q and k
  // heads are L2-normed per token.
  pool_.ParallelFor(p.conv_dim(), 256, [&](int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < qkv.rows; ++t) {
      float* state = StateLayer(plan_.seq_slots[plan_.seq_of_token[t]], layer);
      for (int64_t ch = c0; ch < c1; ++ch) {
        u.f32()[t * u.cols + ch] = GdnConvChannel(p, qkv.f32() + t * qkv.cols, state, ch);
      }
      if (const int32_t plane = PlaneOf(t); plane >= 0) {
        float* copy = StateLayer(plane, layer);
        for (int64_t k = 0; k + 1 < p.conv_kernel; ++k) {
          std::copy(state + k * p.conv_dim() + c0, state + k * p.conv_dim() + c1,
                    copy + k * p.conv_dim() + c0);
        }
      }
    }
  });
  pool_.ParallelFor(qkv.rows * 2 * p.n_k, 8, [&](int64_t begin, int64_t end) {
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / (2 * p.n_k), h = th % (2 * p.n_k);
      L2NormInPlace(u.f32() + t * u.cols + h * p.hd, p.hd, p.eps);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::GdnRecurrence(const GdnLayerParams& p, int64_t layer, Tensor u, Tensor z,
                                       Tensor alpha_beta, Tensor out) {
  ScopedOpTime timer(options_.profile, "gdn recurrence");
  // Value heads are independent: each thread takes whole heads through every token in order,
  // so a head's state stays in cache across a prompt's tokens.
  pool_.ParallelFor(p.n_v, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t t = 0; t < u.rows; ++t) {
        const int32_t slot = plan_.seq_slots[plan_.seq_of_token[t]];
        float* S = StateLayer(slot, layer) + geometry_.conv_floats;
        const float* alpha = alpha_beta.f32() + t * alpha_beta.cols;
        GdnHeadStepFast(options_.isa, p, u.f32() + t * u.cols, z.f32() + t * z.cols, alpha,
                        alpha + p.n_v, h, S, out.f32() + t * out.cols);
        if (const int32_t plane = PlaneOf(t); plane >= 0) {
          const int64_t head = p.hd * p.hd;
          std::copy_n(S + h * head, head,
                      StateLayer(plane, layer) + geometry_.conv_floats + h * head);
        }
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::ReadToHost(Tensor x, float* host) {
  std::memcpy(host, x.f32(), x.rows * x.cols * sizeof(float));
  return absl::OkStatus();
}

}  // namespace walsh
