#include "worker/engine/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/ternary_lanes_layout.h"
#include "worker/engine/rope_table.h"

namespace walsh {
namespace {

// Room kept free for activations (the logits of 512 tokens at a 248k vocabulary are 0.5 GB),
// the attention scores and the step arrays.
constexpr int64_t kActivationReserveBytes = int64_t{2} << 30;
// The attention scores of one launch: tokens are attended in chunks whose scores fit.
constexpr int64_t kScoreChunkFloats = int64_t{64} << 20;
// Kernel limits the CPU does not have: rotation blocks, product widths, GDN head width, and
// tokens per step (grid rows).
constexpr int64_t kMaxRotationBlock = 1024, kMaxProjectionCols = 49152, kMaxGdnHeadDim = 1024;
constexpr int64_t kMaxStepTokens = 65535;

double GiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

int64_t DenseBytes(const DenseWeight& w) {
  return w.rows * w.cols * (w.format == DenseFormat::kF32 ? 4 : 2);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CudaBackend::Create(const Model& model, int device,
                                                             double gpu_memory_utilization,
                                                             OpProfile* profile) {
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu-memory-utilization must be in (0, 1], got ", gpu_memory_utilization));
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("--device cuda: no CUDA device is available (cudaGetDeviceCount: ",
                     e == cudaSuccess ? "0 devices" : cudaGetErrorString(e), ")"));
  }
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device cuda: device ", device, " does not exist (", count, " found)"));
  }
  const Qwen35Config& c = model.config();
  if (model.contract().block_size > kMaxRotationBlock || c.ssm_state_size > kMaxGdnHeadDim) {
    return absl::UnimplementedError(absl::StrCat(
        "--device cuda: rotation block ", model.contract().block_size, " and GDN head width ",
        c.ssm_state_size, " must be at most ", kMaxRotationBlock, " and ", kMaxGdnHeadDim));
  }
  for (const GgufTensorInfo& t : model.gguf().tensors()) {
    if (FindTernaryFormat(t.type) != nullptr &&
        static_cast<int64_t>(t.ne[0]) > kMaxProjectionCols) {
      return absl::UnimplementedError(absl::StrCat("--device cuda: tensor '", t.name, "' has ",
                                                   t.ne[0], " columns; at most ",
                                                   kMaxProjectionCols, " are supported"));
    }
  }
  std::unique_ptr<CudaBackend> b(new CudaBackend(model, device, profile));
  RETURN_IF_ERROR(b->Init(gpu_memory_utilization));
  return std::unique_ptr<Backend>(std::move(b));
}

CudaBackend::CudaBackend(const Model& model, int device, OpProfile* profile)
    : model_(model), device_(device), timeline_(profile) {}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
}

absl::Status CudaBackend::Init(double gpu_memory_utilization) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "set device"));
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "create stream"));
  // The file's tensor data, one contiguous range of the mapping.
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
  for (const GgufTensorInfo& t : model_.gguf().tensors()) {
    if (lo == nullptr || t.data < lo) lo = t.data;
    if (hi == nullptr || t.data + t.n_bytes > hi) hi = t.data + t.n_bytes;
  }
  host_base_ = lo;
  weight_bytes_ = hi - lo;
  size_t free_bytes = 0, total_bytes = 0;
  RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "memory info"));
  const int64_t total = static_cast<int64_t>(total_bytes);
  const int64_t others = total - static_cast<int64_t>(free_bytes);  // held before we start
  const int64_t budget = static_cast<int64_t>(gpu_memory_utilization * total) - others;
  if (weight_bytes_ + kActivationReserveBytes > budget) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the model does not fit on CUDA device %d: its weights need %.2f GiB plus %.2f GiB for "
        "activations; the device has %.2f GiB, %.2f GiB in use by others, and "
        "--gpu-memory-utilization %.2f allows %.2f GiB",
        device_, GiB(weight_bytes_), GiB(kActivationReserveBytes), GiB(total), GiB(others),
        gpu_memory_utilization, GiB(std::max<int64_t>(budget, 0))));
  }
  RETURN_IF_ERROR(weights_.Allocate(weight_bytes_, "the model's weights"));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpy(weights_.as<void>(), lo, static_cast<size_t>(weight_bytes_),
                                        cudaMemcpyHostToDevice),
                             "upload weights"));
  RETURN_IF_ERROR(RepackTernaryTensors());
  cache_room_ = budget - weights_.bytes() - kActivationReserveBytes;
  const std::vector<double> inv_freq =
      RopeInverseFrequencies(model_.config().rope_dimension_count, model_.config().rope_freq_base);
  RETURN_IF_ERROR(rope_inv_freq_.Allocate(inv_freq.size() * sizeof(double), "the RoPE table"));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpy(rope_inv_freq_.as<void>(), inv_freq.data(),
                                        inv_freq.size() * sizeof(double), cudaMemcpyHostToDevice),
                             "upload RoPE table"));
  const std::vector<uint8_t> streams =
      RopeStreamOfPair(model_.config().rope_dimension_count, model_.config().rope_sections);
  RETURN_IF_ERROR(rope_stream_of_pair_.Allocate(std::max<int64_t>(1, streams.size()),
                                                "the M-RoPE stream table"));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpy(rope_stream_of_pair_.as<void>(), streams.data(),
                                        streams.size(), cudaMemcpyHostToDevice),
                             "upload M-RoPE stream table"));
  // Every upload has landed before the first kernel on stream_ (a non-blocking stream).
  return CudaStatus(cudaDeviceSynchronize(), "upload");
}

absl::Status CudaBackend::RepackTernaryTensors() {
  std::vector<uint8_t> staging;
  for (const GgufTensorInfo& t : model_.gguf().tensors()) {
    const TernaryFormatTraits* traits = FindTernaryFormat(t.type);
    if (traits == nullptr || t.ne.empty() || !LanesLayoutFits(static_cast<int64_t>(t.ne[0])) ||
        (t.data - host_base_) % 16 != 0) {
      continue;
    }
    const TernaryWeights w{traits->format, t.data, static_cast<int64_t>(t.rows()),
                           static_cast<int64_t>(t.ne[0])};
    if (w.bytes() != static_cast<int64_t>(t.n_bytes)) {
      return absl::InternalError(
          absl::StrCat("tensor '", t.name, "' holds ", t.n_bytes, " bytes, its rows ", w.bytes()));
    }
    staging.resize(static_cast<size_t>(w.bytes()));
    RepackToLanes(w.format, w.data, w.rows, w.cols, staging.data());
    RETURN_IF_ERROR(CudaStatus(cudaMemcpy(weights_.as<uint8_t>() + (t.data - host_base_),
                                          staging.data(), staging.size(), cudaMemcpyHostToDevice),
                               "upload repacked weights"));
    lanes_tensors_[t.data] = {t.data + w.bytes(), w.cols};
  }
  return absl::OkStatus();
}

absl::StatusOr<TernaryWeights> CudaBackend::DeviceWeights(const TernaryWeights& w) {
  TernaryWeights d = w;
  ASSIGN_OR_RETURN(d.data, ResidentAs(w.data, w.bytes()));
  auto it = lanes_tensors_.upper_bound(w.data);
  if (it == lanes_tensors_.begin()) return d;
  --it;
  if (w.data >= it->second.end) return d;
  if (w.cols != it->second.cols || (w.data - it->first) % w.row_bytes() != 0 ||
      w.data + w.bytes() > it->second.end) {
    return absl::InternalError(
        absl::StrCat("cuda: a view of ", w.rows, "x", w.cols,
                     " ternary weights is not whole rows inside its repacked tensor (",
                     it->second.cols, " wide)"));
  }
  d.layout = TernaryLayout::kLanes;
  return d;
}

absl::Status CudaBackend::Launch(int code, const char* op) {
  RETURN_IF_ERROR(CudaStatus(static_cast<cudaError_t>(code), op));
  return timeline_.Mark(op, stream_);
}

absl::StatusOr<const void*> CudaBackend::Resident(const void* host, int64_t bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(host);
  if (p >= host_base_ && p + bytes <= host_base_ + weight_bytes_) {
    return weights_.as<uint8_t>() + (p - host_base_);
  }
  auto it = uploads_.find(host);
  if (it == uploads_.end() || it->second.bytes() < bytes) {
    // Model data outside the file's tensors (the contract's sign vectors) lives as long as the
    // model, so the copy may run on stream_, ordered before the kernels that read it.
    DeviceBuffer buffer;
    RETURN_IF_ERROR(buffer.Allocate(bytes, "model data"));
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(buffer.as<void>(), host, static_cast<size_t>(bytes),
                                               cudaMemcpyHostToDevice, stream_),
                               "upload model data"));
    it = uploads_.insert_or_assign(host, std::move(buffer)).first;
  }
  return static_cast<const void*>(it->second.as<void>());
}

BackendMemory CudaBackend::Memory() const {
  size_t free_bytes = 0, total_bytes = 0;
  (void)cudaSetDevice(device_);  // callers may be on any thread
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
  return {static_cast<int64_t>(total_bytes - free_bytes), static_cast<int64_t>(total_bytes),
          weights_.bytes(), kv_.bytes(), state_.bytes()};
}

absl::Status CudaBackend::AllocateCaches(const CacheGeometry& g) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "set device"));
  geometry_ = g;
  if (g.kv_dtype == KvCacheDtype::kF32) {
    return absl::UnimplementedError("cuda: fp32 KV pages are the CPU's fp32 debug mode");
  }
  const int64_t kv_bytes = g.pages * g.page_bytes();
  const int64_t state_bytes = g.slots * g.slot_floats() * 4;
  RETURN_IF_ERROR(kv_.Allocate(kv_bytes, "the KV cache"));
  RETURN_IF_ERROR(state_.Allocate(state_bytes, "the recurrent state"));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(kv_.as<void>(), 0, kv_.bytes(), stream_), "clear KV cache"));
  return CudaStatus(cudaMemsetAsync(state_.as<void>(), 0, state_.bytes(), stream_), "clear state");
}

absl::Status CudaBackend::ClearStateSlot(int32_t slot) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "set device"));  // the scheduler's thread
  const int64_t floats = geometry_.slot_floats();
  return CudaStatus(cudaMemsetAsync(state_.as<float>() + slot * floats, 0, floats * 4, stream_),
                    "clear state slot");
}

absl::Status CudaBackend::CopyStateSlot(int32_t from, int32_t to) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "set device"));
  const int64_t floats = geometry_.slot_floats();
  return CudaStatus(
      cudaMemcpyAsync(state_.as<float>() + to * floats, state_.as<float>() + from * floats,
                      floats * 4, cudaMemcpyDeviceToDevice, stream_),
      "copy state slot");
}

absl::Status CudaBackend::CopyKvPage(int32_t from, int32_t to) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "set device"));
  const int64_t bytes = geometry_.page_bytes();
  return CudaStatus(
      cudaMemcpyAsync(kv_.as<uint8_t>() + to * bytes, kv_.as<uint8_t>() + from * bytes, bytes,
                      cudaMemcpyDeviceToDevice, stream_),
      "copy KV page");
}

absl::StatusOr<Tensor> CudaBackend::Activation(int slot, int64_t rows, int64_t cols, DType dtype,
                                               Q8Layout layout) {
  ASSIGN_OR_RETURN(const int64_t bytes, ActivationBytes(slot, rows, cols, dtype));
  DeviceBuffer& b = slots_[slot];
  if (b.bytes() < bytes) {
    // Views handed out earlier in the step keep the old memory until the step ends.
    DeviceBuffer fresh;
    RETURN_IF_ERROR(fresh.Allocate(bytes + bytes / 4, "activations"));
    if (b.bytes() > 0) retired_.push_back(std::move(b));
    b = std::move(fresh);
  }
  return Tensor{b.as<void>(), rows, cols, dtype, layout};
}

absl::Status CudaBackend::BeginStep(const StepPlan& plan) {
  // The engine may be driven from another thread than the one that made it.
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "set device"));
  // The previous step's copies must be done before its host arrays are rewritten (and before
  // the activation memory it outgrew is freed).
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "synchronize"));
  retired_.clear();
  StepArrays& h = host_step_;
  const int64_t n = static_cast<int64_t>(plan.tokens.size());
  if (n > kMaxStepTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda: a step of ", n, " tokens; at most ", kMaxStepTokens, " run in one"));
  }
  const int64_t n_seqs = static_cast<int64_t>(plan.seq_slots.size());
  h.tokens = plan.tokens;
  if ((!plan.rope_of_token.empty() && plan.rope_of_token.size() != 3 * plan.tokens.size()) ||
      (!plan.embedding_of_token.empty() && plan.embedding_of_token.size() != plan.tokens.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda: a step of ", n, " tokens brings ", plan.rope_of_token.size(),
                     " M-RoPE positions and ", plan.embedding_of_token.size(),
                     " image row indices; it needs 3 and 1 per token, or none"));
  }
  if (!plan.plane_of_token.empty() && plan.plane_of_token.size() != plan.tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("cuda: a step of ", n, " tokens brings ",
                                                   plan.plane_of_token.size(),
                                                   " state planes; it needs 1 per token, or none"));
  }
  h.plane_of_token = plan.plane_of_token;
  h.rope_of_token = plan.rope_of_token;
  h.image_row_of_token = plan.embedding_of_token;
  h.image_rows = plan.embedding_rows;
  h.replaces_rows =
      h.image_rows != nullptr && !h.image_rows->empty() && !h.image_row_of_token.empty();
  for (size_t t = 0; t < h.image_row_of_token.size(); ++t) {
    // An image token's id is its cache key (negative); its embedding row is replaced, so it
    // reads row 0 of the table instead of outside it.
    if (h.image_row_of_token[t] >= 0) h.tokens[t] = 0;
  }
  h.pos = plan.pos_of_token;
  h.seq_of = plan.seq_of_token;
  h.seq_slot = plan.seq_slots;
  h.logit_rows = plan.logit_tokens;
  h.seq_first.assign(n_seqs, 0);
  h.seq_count.assign(n_seqs, 0);
  for (int64_t t = n - 1; t >= 0; --t) {
    h.seq_first[plan.seq_of_token[t]] = static_cast<int32_t>(t);
    ++h.seq_count[plan.seq_of_token[t]];
  }
  h.page_offset.clear();
  h.pages.clear();
  for (const std::vector<int32_t>& table : plan.seq_pages) {
    h.page_offset.push_back(static_cast<int32_t>(h.pages.size()));
    h.pages.insert(h.pages.end(), table.begin(), table.end());
  }
  const int64_t n_head = model_.config().head_count;
  h.score_offset.assign(n + 1, 0);
  for (int64_t t = 0; t < n; ++t) {
    h.score_offset[t + 1] = h.score_offset[t] + (plan.pos_of_token[t] + 1) * n_head;
  }
  step_.n_tokens = n;
  step_.n_seqs = n_seqs;
  // Every array of the step in one pinned image and one copy (the stream is idle: see above).
  PackedUpload& image = step_image_;
  image.Clear();
  const int64_t at_pos = image.Add(h.pos), at_seq_of = image.Add(h.seq_of),
                at_seq_first = image.Add(h.seq_first), at_seq_count = image.Add(h.seq_count),
                at_seq_slot = image.Add(h.seq_slot), at_page_offset = image.Add(h.page_offset),
                at_pages = image.Add(h.pages), at_score_offset = image.Add(h.score_offset),
                at_rope = image.Add(h.rope_of_token), at_tokens = image.Add(h.tokens),
                at_logit_rows = image.Add(h.logit_rows),
                at_image_row_of_token = image.Add(h.image_row_of_token),
                at_plane = image.Add(h.plane_of_token);
  const int64_t at_image_rows =
      h.replaces_rows ? image.Add(*h.image_rows) : image.Add<float>(nullptr, 0);
  RETURN_IF_ERROR(pinned_step_.Reserve(image.bytes(), "the step's inputs"));
  RETURN_IF_ERROR(d_step_.Reserve(image.bytes(), "the step's inputs"));
  std::memcpy(pinned_step_.data(), image.data(), static_cast<size_t>(image.bytes()));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(d_step_.as<uint8_t>(), pinned_step_.data(),
                      static_cast<size_t>(image.bytes()), cudaMemcpyHostToDevice, stream_),
      "upload the step's inputs"));
  uint8_t* d = d_step_.as<uint8_t>();
  auto at = [d](int64_t offset) { return reinterpret_cast<int32_t*>(d + offset); };
  step_.pos_of_token = at(at_pos);
  step_.seq_of_token = at(at_seq_of);
  step_.seq_first_token = at(at_seq_first);
  step_.seq_token_count = at(at_seq_count);
  step_.seq_slot = at(at_seq_slot);
  step_.seq_page_offset = at(at_page_offset);
  step_.pages = at(at_pages);
  step_.score_offset = reinterpret_cast<const int64_t*>(d + at_score_offset);
  step_.rope_of_token = h.rope_of_token.empty() ? nullptr : at(at_rope);
  step_.plane_of_token = h.plane_of_token.empty() ? nullptr : at(at_plane);
  d_tokens_ = at(at_tokens);
  d_logit_rows_ = at(at_logit_rows);
  d_image_row_of_token_ = at(at_image_row_of_token);
  d_image_rows_ = reinterpret_cast<const float*>(d + at_image_rows);
  if (model_.attention_layers() > 0) {
    int64_t longest = 1;
    for (int64_t t = 0; t < n; ++t) {
      longest = std::max(longest, h.score_offset[t + 1] - h.score_offset[t]);
    }
    const int64_t floats = std::max(longest, std::min(h.score_offset[n], kScoreChunkFloats));
    RETURN_IF_ERROR(scores_.Reserve(floats * 4, "attention scores"));
  }
  return timeline_.Begin(stream_);
}

absl::Status CudaBackend::Embed(const TernaryWeights& table, bool rotated, const int8_t* signs,
                                Tensor out) {
  ASSIGN_OR_RETURN(const TernaryWeights w, DeviceWeights(table));
  const int32_t* tokens = d_tokens_;
  if (!rotated) {
    RETURN_IF_ERROR(Launch(cuda::EmbedRows(w, tokens, out.rows, out.f32(), stream_), "embedding"));
  } else {
    RETURN_IF_ERROR(embed_scratch_.Reserve(out.rows * out.cols * 4, "embedding rows"));
    RETURN_IF_ERROR(Launch(
        cuda::EmbedRows(w, tokens, out.rows, embed_scratch_.as<float>(), stream_), "embedding"));
    const int8_t* s = nullptr;
    if (signs != nullptr) {
      ASSIGN_OR_RETURN(s, ResidentAs(signs, out.cols));
    }
    RETURN_IF_ERROR(
        Launch(cuda::SignedFwht(embed_scratch_.as<float>(), out.rows, out.cols,
                                model_.contract().block_size, nullptr, s, {}, out.f32(), stream_),
               "embedding inverse transform"));
  }
  if (!host_step_.replaces_rows) return absl::OkStatus();
  // An image's rows replace their tokens' embeddings as they are (no inverse transform).
  return Launch(cuda::ReplaceRows(out.f32(), out.cols, d_image_row_of_token_, out.rows,
                                  d_image_rows_, stream_),
                "image rows");
}

absl::Status CudaBackend::RmsNorm(Tensor x, const float* weight, float eps, Tensor out) {
  ASSIGN_OR_RETURN(const float* w, ResidentAs(weight, x.cols));
  return Launch(cuda::RmsNormRows(x.f32(), x.rows, x.cols, w, eps, out.f32(), stream_), "rms norm");
}

absl::Status CudaBackend::GatherLogitRows(Tensor x, Tensor out) {
  return Launch(cuda::GatherRows(x.f32(), x.cols, d_logit_rows_, out.rows, out.f32(), stream_),
                "gather rows");
}

absl::Status CudaBackend::AddInPlace(Tensor acc, Tensor x) {
  return Launch(cuda::AddInPlace(acc.f32(), x.f32(), acc.rows * acc.cols, stream_), "residual add");
}

absl::Status CudaBackend::SwiGlu(Tensor gate, Tensor up, Tensor out) {
  return Launch(cuda::SwiGlu(gate.f32(), up.f32(), gate.rows * gate.cols, out.f32(), stream_),
                "swiglu");
}

absl::Status CudaBackend::Rotate(Tensor x, Transform t, const int8_t* signs, Tensor out) {
  if (out.dtype == DType::kQ8) return RotateQuantize(x, t, signs, out);
  if (t == Transform::kPlain) {
    return CudaStatus(
        cudaMemcpyAsync(out.f32(), x.f32(), x.rows * x.cols * 4, cudaMemcpyDeviceToDevice, stream_),
        "copy activations");
  }
  const int8_t* s = nullptr;
  if (signs != nullptr) {
    ASSIGN_OR_RETURN(s, ResidentAs(signs, x.cols));
  }
  if (t == Transform::kPermutedRotated) {
    return absl::InternalError("the GatedDeltaNet permutation is applied by its producer");
  }
  const cuda::Permutation perm;
  return Launch(cuda::SignedFwht(x.f32(), x.rows, x.cols, model_.contract().block_size, s, nullptr,
                                 perm, out.f32(), stream_),
                "signed fwht");
}

absl::Status CudaBackend::RotateQuantize(Tensor x, Transform t, const int8_t* signs, Tensor out) {
  const float* src = x.f32();
  if (t != Transform::kPlain) {
    RETURN_IF_ERROR(rotate_scratch_.Reserve(x.rows * x.cols * 4, "rotated activations"));
    RETURN_IF_ERROR(Rotate(x, t, signs, Tensor{rotate_scratch_.as<float>(), x.rows, x.cols}));
    src = rotate_scratch_.as<float>();
  }
  return Launch(cuda::QuantizeRowsQ8(src, x.rows, x.cols, out.layout, out.q8(), stream_),
                "int8 quantization");
}

absl::Status CudaBackend::RunProduct(TernaryProduct product, const RowSelection* rows,
                                     int64_t n_rows, const char* op) {
  ASSIGN_OR_RETURN(product.w, DeviceWeights(product.w));
  if (rows != nullptr && rows->index != nullptr) {
    ASSIGN_OR_RETURN(product.row_index,
                     ResidentAs(rows->index->data(), static_cast<int64_t>(rows->index->size())));
  }
  return Launch(cuda::TernaryMatMulQ8(product, n_rows, stream_), op);
}

absl::Status CudaBackend::MatMul(const Projection& p, Tensor x, const RowSelection& rows,
                                 Tensor y) {
  RETURN_IF_ERROR(RequireInt8(p, x));
  TernaryProduct product = ColumnParallelProduct(p, rows, x.rows, y);
  SetProductInput(x, &product);
  return RunProduct(product, &rows, rows.count(), "ternary matmul");
}

absl::Status CudaBackend::MatMulSlices(const Projection& p, Tensor x, int64_t x_first_col,
                                       const std::vector<Span>& slices,
                                       const std::vector<Tensor>& partials) {
  RETURN_IF_ERROR(RequireInt8(p, x));
  ASSIGN_OR_RETURN(TernaryProduct product,
                   SliceProduct(p, x.rows, x_first_col, x.cols, slices, partials));
  SetProductInput(x, &product);
  return RunProduct(product, nullptr, p.w.rows, "ternary matmul slices");
}

absl::Status CudaBackend::RequireInt8(const Projection& p, Tensor x) {
  if (x.dtype == DType::kQ8) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat("cuda: '", p.name, "' with fp32 activations (a CPU debug mode)"));
}

absl::Status CudaBackend::TreeSum(const std::vector<Tensor>& leaves, Tensor out) {
  if (leaves.size() > 8) return absl::InternalError("cuda: a tree of more than 8 leaves");
  cuda::Leaves l{};
  for (size_t i = 0; i < leaves.size(); ++i) l.leaf[i] = leaves[i].f32();
  return Launch(
      cuda::TreeSum(l, static_cast<int>(leaves.size()), out.rows * out.cols, out.f32(), stream_),
      "tree sum");
}

absl::Status CudaBackend::Copy2D(const float* from, int64_t from_stride, float* to,
                                 int64_t to_stride, int64_t rows, int64_t cols, const char* op) {
  if (rows == 0 || cols == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpy2DAsync(to, to_stride * 4, from, from_stride * 4, cols * 4, rows,
                                      cudaMemcpyDeviceToDevice, stream_),
                    op);
}

absl::Status CudaBackend::CopyColumns(Tensor x, int64_t col_begin, Tensor out) {
  return Copy2D(x.f32() + col_begin, x.cols, out.f32(), out.cols, x.rows, out.cols, "copy columns");
}

absl::Status CudaBackend::PlaceColumns(Tensor x, Tensor out, int64_t col_begin) {
  return Copy2D(x.f32(), x.cols, out.f32() + col_begin, out.cols, x.rows, x.cols, "place columns");
}

absl::Status CudaBackend::Ungroup(Tensor x, int64_t n_k, int64_t rep, int64_t hd, Tensor out) {
  return Launch(cuda::Ungroup(x.f32(), x.rows, n_k, rep, hd, out.f32(), stream_), "ungroup");
}

absl::Status CudaBackend::DenseProject(const DenseWeight& w, Tensor x, const RowSelection& rows,
                                       Tensor y, int64_t col_offset) {
  ASSIGN_OR_RETURN(const void* dw, Resident(w.data, DenseBytes(w)));
  const int32_t* index = nullptr;
  if (rows.index != nullptr) {
    ASSIGN_OR_RETURN(index,
                     ResidentAs(rows.index->data(), static_cast<int64_t>(rows.index->size())));
  }
  return Launch(cuda::DenseProject(w.format, dw, w.cols, index, rows.begin, rows.count(), x.f32(),
                                   x.rows, y.f32(), y.cols, col_offset, stream_),
                "dense projection");
}

cuda::AttentionShape CudaBackend::AttentionShapeOf(const AttentionShard& heads) const {
  const Qwen35Config& c = model_.config();
  cuda::AttentionShape s;
  s.n_head = heads.q_heads;
  s.n_head_kv = heads.kv_heads;
  s.q_head_begin = heads.q_head_begin;
  s.kv_head_begin = heads.kv_head_begin;
  s.group = c.head_count / c.head_count_kv;
  s.head_dim = c.key_length;
  s.n_rot = c.rope_dimension_count;
  s.eps = c.rms_epsilon;
  s.scale = 1.0f / std::sqrt(static_cast<float>(c.key_length));
  s.page_size = geometry_.page_size;
  s.page_stride = geometry_.page_units();
  s.rope_stream_of_pair = rope_stream_of_pair_.as<uint8_t>();
  s.kv = geometry_.kv_dtype == KvCacheDtype::kQ8   ? cuda::KvStorage::kQ8
         : geometry_.kv_dtype == KvCacheDtype::kQ4 ? cuda::KvStorage::kQ4
                                                   : cuda::KvStorage::kFp16;
  return s;
}

uint8_t* CudaBackend::KvLayer(int64_t layer) const {
  return kv_.as<uint8_t>() + layer * 2 * geometry_.page_size * KvRowBytes();
}

int64_t CudaBackend::KvRowBytes() const { return KvBytes(geometry_.kv_dtype, geometry_.kv_dim); }

absl::Status CudaBackend::AttentionPrepare(const AttentionWeights& w, int64_t layer,
                                           const AttentionShard& heads, Tensor q_gate, Tensor k,
                                           Tensor v) {
  const int64_t hd = model_.config().key_length;
  ASSIGN_OR_RETURN(const float* q_norm, ResidentAs(w.q_norm, hd));
  ASSIGN_OR_RETURN(const float* k_norm, ResidentAs(w.k_norm, hd));
  uint8_t* k_layer = KvLayer(layer);
  return Launch(
      cuda::AttentionPrepare(AttentionShapeOf(heads), step_, q_gate.f32(), k.f32(), v.f32(), q_norm,
                             k_norm, rope_inv_freq_.as<double>(), k_layer,
                             k_layer + geometry_.page_size * KvRowBytes(), stream_),
      "attention prepare");
}

absl::Status CudaBackend::Attention(int64_t layer, const AttentionShard& heads, Tensor q_gate,
                                    Tensor out) {
  const uint8_t* k_layer = KvLayer(layer);
  const uint8_t* v_layer = k_layer + geometry_.page_size * KvRowBytes();
  // Tokens in chunks whose scores fit the scratch; each (token, head) reduces alone, so the
  // chunking changes no bit.
  const std::vector<int64_t>& offset = host_step_.score_offset;
  const int64_t capacity = scores_.bytes() / 4;
  for (int64_t begin = 0; begin < step_.n_tokens;) {
    int64_t end = begin + 1;
    while (end < step_.n_tokens && offset[end + 1] - offset[begin] <= capacity) ++end;
    RETURN_IF_ERROR(
        Launch(cuda::Attention(AttentionShapeOf(heads), step_, begin, end, q_gate.f32(), k_layer,
                               v_layer, scores_.as<float>(), out.f32(), stream_),
               "attention"));
    begin = end;
  }
  return absl::OkStatus();
}

absl::StatusOr<GdnLayerParams> CudaBackend::DeviceParams(const GdnLayerParams& host) {
  GdnLayerParams p = host;
  ASSIGN_OR_RETURN(p.conv_w, ResidentAs(host.conv_w, p.conv_dim() * p.conv_kernel));
  ASSIGN_OR_RETURN(p.ssm_a, ResidentAs(host.ssm_a, p.n_v));
  ASSIGN_OR_RETURN(p.dt_bias, ResidentAs(host.dt_bias, p.n_v));
  ASSIGN_OR_RETURN(p.norm_w, ResidentAs(host.norm_w, p.hd));
  return p;
}

cuda::GdnStateView CudaBackend::StateView(int64_t layer) const {
  return {state_.as<float>(), geometry_.slot_floats(),
          layer * (geometry_.conv_floats + geometry_.recurrent_floats), geometry_.conv_floats};
}

absl::Status CudaBackend::GdnConv(const GdnLayerParams& host, int64_t layer, Tensor qkv, Tensor u) {
  ASSIGN_OR_RETURN(const GdnLayerParams p, DeviceParams(host));
  return Launch(cuda::GdnConv(p, step_, StateView(layer), qkv.f32(), u.f32(), stream_), "gdn conv");
}

absl::Status CudaBackend::GdnRecurrence(const GdnLayerParams& host, int64_t layer, Tensor u,
                                        Tensor z, Tensor alpha_beta, Tensor out) {
  ASSIGN_OR_RETURN(const GdnLayerParams p, DeviceParams(host));
  return Launch(cuda::GdnRecurrence(p, step_, StateView(layer), u.f32(), z.f32(), alpha_beta.f32(),
                                    out.f32(), stream_),
                "gdn recurrence");
}

absl::Status CudaBackend::ReadToHost(Tensor x, float* host) {
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host, x.f32(), x.rows * x.cols * 4, cudaMemcpyDeviceToHost, stream_),
      "read logits"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "step"));
  return timeline_.Collect();
}

}  // namespace walsh
