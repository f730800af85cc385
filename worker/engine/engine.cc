#include "worker/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/block_types.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/ops.h"
#include "kernels/hadamard_ref.h"
#include "kernels/ternary_codec_ref.h"
#include "worker/model/ggml_types.h"

namespace walsh {

// The activation of one matmul input for all tokens of the step, with its transformed and
// quantized forms computed once and shared by every projection that reads it (q/k/v,
// qkv/gate, gate/up): FORMAT.md §7.2 "Sharing".
class Engine::ProjectionInput {
 public:
  ProjectionInput(const float* plain, int64_t n_tokens, int64_t width)
      : plain_(plain), n_(n_tokens), width_(width) {}

  int64_t n_tokens() const { return n_; }
  int64_t width() const { return width_; }

  const float* Get(Transform t, const Projection& p, const Engine& e) {
    if (t == Transform::kPlain) return plain_;
    std::vector<float>& buf = transformed_[static_cast<int>(t)];
    if (buf.empty()) {
      buf.resize(n_ * width_);
      std::vector<float> permuted(t == Transform::kPermutedRotated ? width_ : 0);
      const GdnPermute& g = e.model().contract().gdn;
      const int64_t block = e.model().contract().block_size;
      for (int64_t i = 0; i < n_; ++i) {
        const float* x = plain_ + i * width_;
        if (t == Transform::kPermutedRotated) {
          GdnPermuteRef(x, g.n_k, g.rep, g.hd, permuted.data());
          x = permuted.data();
        }
        SignedFwhtForward(e.isa_, x, p.signs, width_, block, buf.data() + i * width_);
      }
    }
    return buf.data();
  }

  const Q8Block128* GetQ8(Transform t, const Projection& p, const Engine& e) {
    const Q8Layout layout = Q8LayoutFor(p.w.ggml_type);
    std::vector<Q8Block128>& q = q8_[static_cast<int>(t) * 2 + static_cast<int>(layout)];
    if (q.empty()) {
      const float* x = Get(t, p, e);
      const int64_t nb = width_ / kTernaryBlockElems;
      q.resize(n_ * nb);
      for (int64_t i = 0; i < n_; ++i) QuantizeRowQ8(x + i * width_, width_, layout, &q[i * nb]);
    }
    return q.data();
  }

 private:
  const float* plain_;
  int64_t n_, width_;
  std::vector<float> transformed_[3];
  std::vector<Q8Block128> q8_[6];
};

// Ranks 1..N-1 of a tensor-parallel group, each a thread that computes its rows of every
// projection and joins the all-gather; rank 0 is the calling thread.
class Engine::TpRanks {
 public:
  TpRanks(int ranks, CpuCommunicator* comm, std::chrono::milliseconds timeout, int stall_rank)
      : comm_(comm), timeout_(timeout), stall_rank_(stall_rank) {
    for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { Loop(r); });
  }
  ~TpRanks() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Every rank runs work(rank) on its rows, then all meet in the all-gather.
  absl::Status Run(const std::function<void(int)>& work) {
    {
      std::lock_guard<std::mutex> l(mu_);
      work_ = &work;
      ++generation_;
    }
    cv_.notify_all();
    work(0);
    return comm_->AllGatherInPlace(0, nullptr, {}, {}, timeout_);
  }

 private:
  void Loop(int rank) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* work;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        work = work_;
      }
      if (rank == stall_rank_ && ++served_ > kStallAfter) {
        std::this_thread::sleep_for(timeout_ * 2);  // a stalled rank (tests)
        continue;
      }
      (*work)(rank);
      (void)comm_->AllGatherInPlace(rank, nullptr, {}, {}, timeout_);
    }
  }

  // The stalled test rank answers this many collectives first (a worker's canary step).
  static constexpr int kStallAfter = 200;
  CpuCommunicator* comm_;
  std::chrono::milliseconds timeout_;
  int stall_rank_;
  int served_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* work_ = nullptr;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

Engine::~Engine() = default;

struct Engine::Scratch {
  std::vector<float> a, b, x1, x2, x3, x4, x5;
};

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Model> model,
                                                       const EngineOptions& options) {
  const Qwen35Config& c = model->config();
  if (options.threads < 1 || options.threads > 1024) {
    return absl::InvalidArgumentError("engine threads must be 1..1024");
  }
  if (options.page_size < 1) return absl::InvalidArgumentError("KV page size must be >= 1");
  const int64_t kv_dim = c.head_count_kv * c.key_length;
  const int64_t page_bytes = KvPagePool::PageBytes(
      options.page_size, std::max<int64_t>(model->attention_layers(), 1), kv_dim);
  const int64_t slot_bytes = StateSlotPool::SlotBytes(
      std::max<int64_t>(model->gdn_layers(), 1), (c.ssm_conv_kernel - 1) * c.gdn_conv_dim(),
      c.ssm_time_step_rank * c.ssm_state_size * c.ssm_state_size);
  const int64_t pages =
      options.kv_pages > 0 ? options.kv_pages : options.kv_cache_bytes / page_bytes;
  const int64_t slots =
      options.state_slots > 0 ? options.state_slots : options.state_bytes / slot_bytes;
  if (pages < 1) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache budget of ", options.kv_cache_bytes,
                                                   " bytes holds no page (a page is ", page_bytes,
                                                   " bytes)"));
  }
  if (slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat("state budget of ", options.state_bytes,
                                                   " bytes holds no slot (a slot is ", slot_bytes,
                                                   " bytes)"));
  }
  if (options.tp < 1 || options.tp > 64) return absl::InvalidArgumentError("tp must be 1..64");
  if (options.isa && !CpuSupports(*options.isa)) {
    return absl::InvalidArgumentError(
        absl::StrCat("this CPU does not support the ", CpuIsaName(*options.isa), " kernels"));
  }
  std::unique_ptr<Engine> engine(new Engine(std::move(model), options, pages, slots));
  if (options.tp > 1) {
    engine->comm_ = std::make_unique<CpuCommunicator>(options.tp);
    engine->plan_ =
        std::make_unique<ShardPlan>(ShardPlan::Build(engine->model_->file(), options.tp));
    engine->ranks_ = std::make_unique<TpRanks>(
        options.tp, engine->comm_.get(), options.collective_timeout, options.debug_stall_rank);
  }
  if (!engine->kv_.allocated() || !engine->states_.allocated()) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", options.kv_cache_bytes,
                                                     " bytes of KV cache and ", options.state_bytes,
                                                     " bytes of recurrent state"));
  }
  return engine;
}

Engine::Engine(std::unique_ptr<Model> model, const EngineOptions& options, int64_t pages,
               int64_t slots)
    : model_(std::move(model)),
      options_(options),
      isa_(options.isa.value_or(BestCpuIsa())),
      max_context_(options.max_context > 0
                       ? std::min(options.max_context, model_->config().context_length)
                       : model_->config().context_length),
      pool_(options.threads),
      kv_(pages, options.page_size, std::max<int64_t>(model_->attention_layers(), 1),
          model_->config().head_count_kv * model_->config().key_length),
      states_(slots, std::max<int64_t>(model_->gdn_layers(), 1),
              (model_->config().ssm_conv_kernel - 1) * model_->config().gdn_conv_dim(),
              model_->config().ssm_time_step_rank * model_->config().ssm_state_size *
                  model_->config().ssm_state_size) {}

absl::StatusOr<SequenceId> Engine::AddSequence() {
  ASSIGN_OR_RETURN(int32_t slot, states_.Allocate());
  const SequenceId id = next_id_++;
  sequences_[id].slot = slot;
  return id;
}

absl::Status Engine::RemoveSequence(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  kv_.Release(it->second.pages);
  states_.Release(it->second.slot);
  sequences_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Engine::SequenceLength(SequenceId id) const {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  return it->second.length;
}

EngineStats Engine::Stats() const {
  return {kv_.used(), kv_.total(), states_.used(), states_.total()};
}

Engine::Transform Engine::RequiredTransform(const Projection& p) {
  if (!p.folded) return Transform::kPlain;
  return p.gdn_permute ? Transform::kPermutedRotated : Transform::kRotated;
}

absl::Status Engine::CheckTransform(const Projection& p, Transform applied) const {
  if (applied != RequiredTransform(p)) {
    return absl::InternalError(
        absl::StrCat("graph check: '", p.name, "' ", p.folded ? "is folded" : "is not folded",
                     " but its input got transform ", static_cast<int>(applied), ", not ",
                     static_cast<int>(RequiredTransform(p))));
  }
  return absl::OkStatus();
}

absl::Status Engine::Project(const Projection& p, ProjectionInput& in, float* y) {
  if (p.w.cols != in.width()) {
    return absl::InternalError(absl::StrCat("'", p.name, "' takes width ", p.w.cols,
                                            ", got an activation of width ", in.width()));
  }
  const Transform t = RequiredTransform(p);
  RETURN_IF_ERROR(CheckTransform(p, t));
  const int64_t rows = p.w.rows, n = in.n_tokens();
  if (ranks_ != nullptr) {
    const WeightShards* shards = plan_->Find(p.name);
    if (shards == nullptr)
      return absl::InternalError(absl::StrCat("no shard plan for '", p.name, "'"));
    const Q8Block128* xq = options_.quantize_activations ? in.GetQ8(t, p, *this) : nullptr;
    const float* xf = options_.quantize_activations ? nullptr : in.Get(t, p, *this);
    const std::function<void(int)> work = [&](int rank) {
      const RowRange r = shards->ranks[rank];
      if (r.size() == 0) return;
      if (xq != nullptr) {
        TernaryMatMulQ8(isa_, p.w, xq, n, y, rows, r.begin, r.end);
      } else {
        TernaryMatMulF32(p.w, xf, n, y, rows, r.begin, r.end);
      }
    };
    return ranks_->Run(work);
  }
  const int64_t grain = std::max<int64_t>(8, rows / (pool_.threads() * 8));
  if (options_.quantize_activations) {
    const Q8Block128* x = in.GetQ8(t, p, *this);
    pool_.ParallelFor(rows, grain, [&](int64_t r0, int64_t r1) {
      TernaryMatMulQ8(isa_, p.w, x, n, y, rows, r0, r1);
    });
  } else {
    const float* x = in.Get(t, p, *this);
    pool_.ParallelFor(
        rows, grain, [&](int64_t r0, int64_t r1) { TernaryMatMulF32(p.w, x, n, y, rows, r0, r1); });
  }
  return absl::OkStatus();
}

void Engine::Embed(int32_t token, float* out) const {
  const TernaryWeights& e = model_->token_embd();
  const int64_t h = e.cols, nb = h / kTernaryBlockElems;
  if (e.ggml_type == kGgmlPq2_0) {
    DequantizeRowPq2_0Ref(reinterpret_cast<const block_pq2_0*>(e.data) + token * nb, out, h);
  } else {
    DequantizeRowPtq1_0Ref(reinterpret_cast<const block_ptq1_0*>(e.data) + token * nb, out, h);
  }
  if (model_->embd_rotated()) {
    SignedFwhtInverse(isa_, out, model_->embd_signs(), h, model_->contract().block_size, out);
  }
}

absl::Status Engine::AttentionLayer(const LayerWeights& L, const std::vector<int64_t>& seq_of,
                                    const std::vector<int64_t>& pos_of,
                                    const std::vector<Sequence*>& seqs, const float* a,
                                    float* mixer, Scratch& s) {
  const Qwen35Config& c = model_->config();
  const int64_t n = static_cast<int64_t>(seq_of.size()), H = c.embedding_length;
  const int64_t hd = c.key_length, nh = c.head_count, nkv = c.head_count_kv;
  const int64_t q_rows = 2 * nh * hd, kv_dim = nkv * hd, group = nh / nkv;
  s.x1.resize(n * q_rows);
  s.x2.resize(n * kv_dim);
  s.x3.resize(n * kv_dim);
  s.x4.resize(n * nh * hd);
  ProjectionInput in(a, n, H);
  RETURN_IF_ERROR(Project(L.attn.q, in, s.x1.data()));
  RETURN_IF_ERROR(Project(L.attn.k, in, s.x2.data()));
  RETURN_IF_ERROR(Project(L.attn.v, in, s.x3.data()));
  const int64_t layer = L.cache_index, page = kv_.page_size();
  // QK-norm and RoPE, then every token's K and V into the cache before anyone attends.
  for (int64_t t = 0; t < n; ++t) {
    float* qg = s.x1.data() + t * q_rows;
    for (int64_t j = 0; j < nh; ++j) {
      float* q = qg + j * 2 * hd;
      RmsNorm(q, L.attn.q_norm, hd, c.rms_epsilon, q);
      RopeNeoxInPlace(q, c.rope_dimension_count, pos_of[t], c.rope_freq_base);
    }
    float* k = s.x2.data() + t * kv_dim;
    for (int64_t m = 0; m < nkv; ++m) {
      RmsNorm(k + m * hd, L.attn.k_norm, hd, c.rms_epsilon, k + m * hd);
      RopeNeoxInPlace(k + m * hd, c.rope_dimension_count, pos_of[t], c.rope_freq_base);
    }
    Sequence* sq = seqs[seq_of[t]];
    const int32_t pg = sq->pages[pos_of[t] / page];
    const int64_t slot = pos_of[t] % page;
    std::memcpy(kv_.K(pg, layer) + slot * kv_dim, k, kv_dim * sizeof(float));
    std::memcpy(kv_.V(pg, layer) + slot * kv_dim, s.x3.data() + t * kv_dim, kv_dim * sizeof(float));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Page tables per sequence, then every (token, head) pair in parallel: each reduces over its
  // keys in position order on one thread, so the thread count never changes a bit.
  std::vector<std::vector<const float*>> kp(seqs.size()), vp(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int32_t pg : seqs[i]->pages) {
      kp[i].push_back(kv_.K(pg, layer));
      vp[i].push_back(kv_.V(pg, layer));
    }
  }
  pool_.ParallelFor(n * nh, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / nh, j = th % nh;
      scores.resize(pos_of[t] + 1);
      const float* q = s.x1.data() + t * q_rows + j * 2 * hd;
      const float* g = q + hd;
      float* u = s.x4.data() + t * nh * hd + j * hd;
      const PagedKv kv{kp[seq_of[t]].data(), vp[seq_of[t]].data(), page, kv_dim,
                       (j / group) * hd};  // blocked GQA
      AttendOneHead(q, hd, kv, pos_of[t] + 1, scale, scores.data(), u);
      for (int64_t i = 0; i < hd; ++i) u[i] *= Sigmoid(g[i]);
    }
  });
  ProjectionInput out_in(s.x4.data(), n, nh * hd);
  return Project(L.attn.o, out_in, mixer);
}

absl::Status Engine::GdnLayer(const LayerWeights& L, const std::vector<int64_t>& seq_of,
                              const std::vector<Sequence*>& seqs, const float* a, float* mixer,
                              Scratch& s) {
  const Qwen35Config& c = model_->config();
  const int64_t n = static_cast<int64_t>(seq_of.size()), H = c.embedding_length;
  const int64_t conv_dim = c.gdn_conv_dim(), inner = c.ssm_inner_size, nv = c.ssm_time_step_rank;
  s.x1.resize(n * conv_dim);
  s.x2.resize(n * inner);
  s.x3.resize(n * 2 * nv);
  s.x4.resize(n * inner);
  s.x5.resize(conv_dim);
  ProjectionInput in(a, n, H);
  RETURN_IF_ERROR(Project(L.gdn.qkv, in, s.x1.data()));
  RETURN_IF_ERROR(Project(L.gdn.gate, in, s.x2.data()));
  const GdnLayerParams params{c.ssm_group_count, nv,         c.ssm_state_size,
                              c.ssm_conv_kernel, L.gdn.conv, L.gdn.ssm_a,
                              L.gdn.dt_bias,     L.gdn.norm, c.rms_epsilon};
  for (int64_t t = 0; t < n; ++t) {
    // ssm_alpha / ssm_beta are not folded: they read the plain normed state (FORMAT.md §8.3).
    float* alpha = s.x3.data() + t * 2 * nv;
    float* beta = alpha + nv;
    DenseMatVec(L.gdn.alpha.ggml_type, L.gdn.alpha.data, nv, H, a + t * H, alpha);
    DenseMatVec(L.gdn.beta.ggml_type, L.gdn.beta.data, nv, H, a + t * H, beta);
    Sequence* sq = seqs[seq_of[t]];
    // The recurrence runs token by token; within a token the value heads are independent.
    GdnConvStep(params, s.x1.data() + t * conv_dim, states_.Conv(sq->slot, L.cache_index),
                s.x5.data());
    float* S = states_.Recurrent(sq->slot, L.cache_index);
    const float* z = s.x2.data() + t * inner;
    float* out = s.x4.data() + t * inner;
    pool_.ParallelFor(nv, 1, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) GdnHeadStep(params, s.x5.data(), z, alpha, beta, h, S, out);
    });
  }
  ProjectionInput out_in(s.x4.data(), n, inner);
  return Project(L.gdn.out, out_in, mixer);
}

absl::StatusOr<ForwardResult> Engine::Forward(const std::vector<SequenceInput>& batch) {
  const Qwen35Config& c = model_->config();
  // Validate everything before touching any state.
  std::vector<Sequence*> seqs;
  absl::flat_hash_set<SequenceId> seen;
  int64_t pages_needed = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& in = batch[i];
    auto it = sequences_.find(in.id);
    if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", in.id));
    if (!seen.insert(in.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", in.id, " appears twice in a batch"));
    }
    if (in.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", in.id, " brings no tokens"));
    }
    for (int32_t tok : in.tokens) {
      if (tok < 0 || tok >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", tok, " is outside [0, ", c.vocab_size, ")"));
      }
    }
    Sequence& sq = it->second;
    const int64_t new_len = sq.length + static_cast<int64_t>(in.tokens.size());
    if (new_len > max_context_) {
      return absl::OutOfRangeError(absl::StrCat("sequence ", in.id, " would reach ", new_len,
                                                " tokens; the context limit is ", max_context_));
    }
    const int64_t pages = (new_len + kv_.page_size() - 1) / kv_.page_size();
    pages_needed += std::max<int64_t>(0, pages - static_cast<int64_t>(sq.pages.size()));
    seqs.push_back(&sq);
  }
  if (model_->attention_layers() > 0) {
    ASSIGN_OR_RETURN(std::vector<int32_t> fresh, kv_.Allocate(pages_needed));
    size_t next = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const int64_t new_len = seqs[i]->length + static_cast<int64_t>(batch[i].tokens.size());
      while (static_cast<int64_t>(seqs[i]->pages.size()) * kv_.page_size() < new_len) {
        seqs[i]->pages.push_back(fresh[next++]);
      }
    }
  }

  // Flatten: each sequence's tokens in order.
  std::vector<int64_t> seq_of, pos_of;
  std::vector<int32_t> tokens;
  ForwardResult result;
  result.vocab = c.vocab_size;
  std::vector<int64_t> logit_tokens;
  for (size_t i = 0; i < batch.size(); ++i) {
    for (size_t j = 0; j < batch[i].tokens.size(); ++j) {
      const int64_t pos = seqs[i]->length + static_cast<int64_t>(j);
      if (batch[i].all_logits || j + 1 == batch[i].tokens.size()) {
        logit_tokens.push_back(static_cast<int64_t>(tokens.size()));
        result.rows.push_back({batch[i].id, pos});
      }
      seq_of.push_back(static_cast<int64_t>(i));
      pos_of.push_back(pos);
      tokens.push_back(batch[i].tokens[j]);
    }
  }
  const int64_t n = static_cast<int64_t>(tokens.size()), H = c.embedding_length;

  std::vector<float> h(n * H), a(n * H), mixer(n * H);
  for (int64_t t = 0; t < n; ++t) Embed(tokens[t], h.data() + t * H);
  Scratch s;
  std::vector<float> ff_gate, ff_up, ff_act;
  for (const LayerWeights& L : model_->layers()) {
    for (int64_t t = 0; t < n; ++t)
      RmsNorm(h.data() + t * H, L.attn_norm, H, c.rms_epsilon, a.data() + t * H);
    if (L.full_attention) {
      RETURN_IF_ERROR(AttentionLayer(L, seq_of, pos_of, seqs, a.data(), mixer.data(), s));
    } else {
      RETURN_IF_ERROR(GdnLayer(L, seq_of, seqs, a.data(), mixer.data(), s));
    }
    for (int64_t i = 0; i < n * H; ++i) h[i] += mixer[i];
    for (int64_t t = 0; t < n; ++t) {
      RmsNorm(h.data() + t * H, L.post_attention_norm, H, c.rms_epsilon, a.data() + t * H);
    }
    const int64_t F = c.feed_forward_length;
    ff_gate.resize(n * F);
    ff_up.resize(n * F);
    ff_act.resize(n * F);
    ProjectionInput ffn_in(a.data(), n, H);
    RETURN_IF_ERROR(Project(L.ffn_gate, ffn_in, ff_gate.data()));
    RETURN_IF_ERROR(Project(L.ffn_up, ffn_in, ff_up.data()));
    SwiGlu(ff_gate.data(), ff_up.data(), n * F, ff_act.data());
    ProjectionInput down_in(ff_act.data(), n, F);
    RETURN_IF_ERROR(Project(L.ffn_down, down_in, mixer.data()));
    for (int64_t i = 0; i < n * H; ++i) h[i] += mixer[i];
  }

  const int64_t m = static_cast<int64_t>(logit_tokens.size());
  std::vector<float> o(m * H);
  for (int64_t i = 0; i < m; ++i) {
    RmsNorm(h.data() + logit_tokens[i] * H, model_->output_norm(), H, c.rms_epsilon,
            o.data() + i * H);
  }
  result.logits.resize(m * c.vocab_size);
  ProjectionInput head_in(o.data(), m, H);
  RETURN_IF_ERROR(Project(model_->output(), head_in, result.logits.data()));

  for (size_t i = 0; i < batch.size(); ++i) {
    seqs[i]->length += static_cast<int64_t>(batch[i].tokens.size());
  }
  return result;
}

}  // namespace walsh
