#include "worker/parallel/shard_plan.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace walsh {
namespace {

Span Part(int64_t total, int r, int n) { return {total * r / n, total * (r + 1) / n}; }

}  // namespace

absl::StatusOr<ShardPlan> ShardPlan::Build(const ModelFile& model, int ranks) {
  if (ranks != 1 && ranks != 2 && ranks != 4 && ranks != 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism over ", ranks,
        " ranks: walsh splits row-parallel products over 8 canonical slices, so the rank count "
        "must be 1, 2, 4 or 8"));
  }
  const Qwen35Config& c = model.config;
  ShardPlan plan;
  plan.ranks_ = ranks;
  plan.block_ = model.contract.block_size;
  plan.config_ = c;
  plan.gdn_grouped_ = model.contract.gdn_v_grouped;
  // The row-parallel products' inputs fall into slices of whole rotation blocks.
  const std::pair<const char*, int64_t> inputs[] = {
      {"ffn_down (the FFN width)", c.feed_forward_length},
      {"attn_output (query heads x head width)", c.head_count * c.key_length},
      {"ssm_out (value heads x head width)", c.ssm_inner_size}};
  for (const auto& [what, width] : inputs) {
    if (width % plan.block_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat("the input of ", what, " is ", width,
                                                     " wide, not whole rotation blocks of ",
                                                     plan.block_));
    }
  }
  if (c.head_count % c.head_count_kv != 0 || c.ssm_time_step_rank % c.ssm_group_count != 0) {
    return absl::InvalidArgumentError("the query heads or GDN value heads do not group evenly");
  }
  const int64_t group = c.head_count / c.head_count_kv;
  const int64_t rep = c.ssm_time_step_rank / c.ssm_group_count;
  for (int r = 0; r < ranks; ++r) {
    RankShard s;
    s.q_heads = Part(c.head_count, r, ranks);
    if (!s.q_heads.empty()) {
      s.kv_heads = {s.q_heads.begin / group, (s.q_heads.end + group - 1) / group};
    }
    s.value_heads = Part(c.ssm_time_step_rank, r, ranks);
    if (!s.value_heads.empty()) {
      s.key_heads = {s.value_heads.begin / rep, (s.value_heads.end + rep - 1) / rep};
    }
    const Span ffn = plan.OwnedColumns(c.feed_forward_length, r);
    s.ffn_blocks = {ffn.begin / plan.block_, ffn.end / plan.block_};
    s.vocab = Part(c.vocab_size, r, ranks);
    plan.shards_.push_back(s);
  }
  for (const GgufTensorInfo& t : model.gguf->tensors()) {
    if (t.name == "token_embd.weight" && !model.contract.tied_output) continue;  // a lookup
    plan.tensors_.push_back({t.name, t.ne.size() > 1 ? static_cast<int64_t>(t.ne[1]) : 1,
                             static_cast<int64_t>(t.ne[0]), static_cast<int64_t>(t.n_bytes)});
  }
  return plan;
}

Span ShardPlan::SliceColumns(int64_t cols, int s) const {
  const int64_t blocks = cols / block_;
  return {blocks * s / kSlices * block_, blocks * (s + 1) / kSlices * block_};
}

Span ShardPlan::OwnedColumns(int64_t cols, int r) const {
  const Span slices = RankSlices(r);
  return {SliceColumns(cols, static_cast<int>(slices.begin)).begin,
          SliceColumns(cols, static_cast<int>(slices.end) - 1).end};
}

Span ShardPlan::AttentionOutputColumns(int r) const {
  const int64_t hd = config_.key_length;
  return {shards_[r].q_heads.begin * hd, shards_[r].q_heads.end * hd};
}

Span ShardPlan::GdnOutputColumns(int r) const {
  const int64_t hd = config_.ssm_state_size;
  return {shards_[r].value_heads.begin * hd, shards_[r].value_heads.end * hd};
}

bool ShardPlan::AttentionOutputAligned() const {
  for (int r = 0; r < ranks_; ++r) {
    if (!(AttentionOutputColumns(r) == OwnedColumns(config_.head_count * config_.key_length, r)))
      return false;
  }
  return true;
}

bool ShardPlan::GdnOutputAligned() const {
  if (ranks_ == 1) return true;
  if (!gdn_grouped_) return false;  // the weights read tiled order: gather, then reorder
  for (int r = 0; r < ranks_; ++r) {
    if (!(GdnOutputColumns(r) == OwnedColumns(config_.ssm_inner_size, r))) return false;
  }
  return true;
}

int ShardPlan::CollectivesPerLayer() const {
  if (ranks_ == 1) return 0;
  // The mixer's and the FFN's row-parallel trees, and a gather where heads straddle slices.
  return 2 + ((AttentionOutputAligned() && GdnOutputAligned()) ? 0 : 1);
}

int64_t ShardPlan::CommBytesPerTokenPerLayer() const {
  if (ranks_ == 1) return 0;
  const Qwen35Config& c = config_;
  int64_t worst = 0;
  // The two trees receive the other ranks' partial rows; a gather, the columns not held.
  auto layer = [&](bool aligned, int64_t cols, Span (ShardPlan::*held)(int) const) {
    int64_t bytes = 2 * (ranks_ - 1) * c.embedding_length * 4;
    if (!aligned) {
      int64_t least = cols;
      for (int r = 0; r < ranks_; ++r) least = std::min(least, (this->*held)(r).size());
      bytes += (cols - least) * 4;
    }
    worst = std::max(worst, bytes);
  };
  layer(AttentionOutputAligned(), c.head_count * c.key_length, &ShardPlan::AttentionOutputColumns);
  layer(GdnOutputAligned(), c.ssm_inner_size, &ShardPlan::GdnOutputColumns);
  return worst;
}

RankCost ShardPlan::Cost(int r) const {
  const Qwen35Config& c = config_;
  const RankShard& s = shards_[r];
  const int64_t hd = c.key_length, shd = c.ssm_state_size;
  RankCost cost;
  for (const TensorBytes& t : tensors_) {
    const int64_t row_bytes = t.bytes / t.rows;
    auto rows = [&](int64_t n) { return n * row_bytes; };
    auto cols = [&](Span owned) { return t.bytes / t.cols * owned.size(); };
    const std::string& n = t.name;
    if (absl::EndsWith(n, ".attn_q.weight")) {
      cost.weight_bytes += rows(s.q_heads.size() * 2 * hd);
    } else if (absl::EndsWith(n, ".attn_k.weight") || absl::EndsWith(n, ".attn_v.weight")) {
      cost.weight_bytes += rows(s.kv_heads.size() * hd);
    } else if (absl::EndsWith(n, ".attn_output.weight") || absl::EndsWith(n, ".ssm_out.weight") ||
               absl::EndsWith(n, ".ffn_down.weight")) {
      cost.weight_bytes += cols(OwnedColumns(t.cols, r));
    } else if (absl::EndsWith(n, ".attn_qkv.weight")) {
      cost.weight_bytes += rows((2 * s.key_heads.size() + s.value_heads.size()) * shd);
    } else if (absl::EndsWith(n, ".attn_gate.weight")) {
      cost.weight_bytes += rows(s.value_heads.size() * shd);
    } else if (absl::EndsWith(n, ".ssm_alpha.weight") || absl::EndsWith(n, ".ssm_beta.weight")) {
      cost.weight_bytes += rows(s.value_heads.size());
    } else if (absl::EndsWith(n, ".ffn_gate.weight") || absl::EndsWith(n, ".ffn_up.weight")) {
      cost.weight_bytes += rows(s.ffn_blocks.size() * block_);
    } else if (n == "output.weight" || n == "token_embd.weight") {
      cost.weight_bytes += rows(s.vocab.size());
    } else {
      cost.weight_bytes += t.bytes;  // norms, conv taps and gates: every rank reads them
    }
  }
  int64_t attention_layers = 0;
  for (int64_t i = 0; i < c.block_count; ++i) attention_layers += c.IsFullAttention(i);
  const int64_t gdn_layers = c.block_count - attention_layers;
  cost.kv_bytes_per_token = attention_layers * 2 * s.kv_heads.size() * hd * 2;  // fp16
  const int64_t conv_channels = (2 * s.key_heads.size() + s.value_heads.size()) * shd;
  cost.state_bytes_per_sequence =
      gdn_layers * ((c.ssm_conv_kernel - 1) * conv_channels + s.value_heads.size() * shd * shd) * 4;
  return cost;
}

std::string ShardPlan::DebugString() const {
  auto span = [](Span s) { return absl::StrFormat("[%d,%d)", s.begin, s.end); };
  std::string out = absl::StrFormat(
      "tensor-parallel plan: %d ranks; heads, KV and state split by heads; row-parallel products "
      "over %d canonical slices\n",
      ranks_, kSlices);
  absl::StrAppendFormat(&out, "collectives per layer: %d; received per token per layer: %d bytes\n",
                        CollectivesPerLayer(), CommBytesPerTokenPerLayer());
  absl::StrAppendFormat(&out, "attention output: %s; GatedDeltaNet output: %s\n",
                        AttentionOutputAligned() ? "held in whole slices" : "all-gathered first",
                        GdnOutputAligned() ? "held in whole slices" : "all-gathered first");
  absl::StrAppendFormat(&out, "%-4s %-9s %-9s %-11s %-9s %-10s %-16s %14s %14s %15s\n", "rank",
                        "q heads", "kv heads", "value heads", "key heads", "ffn blocks",
                        "vocab rows", "weight bytes", "kv bytes/token", "state bytes/seq");
  for (int r = 0; r < ranks_; ++r) {
    const RankShard& s = shards_[r];
    const RankCost c = Cost(r);
    absl::StrAppendFormat(&out, "%-4d %-9s %-9s %-11s %-9s %-10s %-16s %14d %14d %15d\n", r,
                          span(s.q_heads), span(s.kv_heads), span(s.value_heads), span(s.key_heads),
                          span(s.ffn_blocks), span(s.vocab), c.weight_bytes, c.kv_bytes_per_token,
                          c.state_bytes_per_sequence);
  }
  return out;
}

}  // namespace walsh
