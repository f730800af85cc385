#include "worker/engine/rank_command.h"

#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace walsh {
namespace {

// A command's header: what it is and how many bytes follow (a follower learns the length first).
constexpr uint32_t kMagic = 0x574c5331;  // "WLS1"
// The largest a step's command grows (an image step's rows included) is tens of MiB.
constexpr uint64_t kMaxCommandBytes = uint64_t{1} << 30;
// Cache sizes a leader may ask for: indices fit int32, a page holds at most 2^20 positions.
constexpr int64_t kMaxCacheUnits = INT32_MAX;
constexpr int64_t kMaxPageSize = int64_t{1} << 20;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    Put<uint64_t>(v.size());
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  template <typename T>
  absl::Status Get(T* v) {
    if (in_.size() < sizeof(T)) return Short();
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status GetVector(std::vector<T>* v) {
    uint64_t n = 0;
    RETURN_IF_ERROR(Get(&n));
    if (n > in_.size() / sizeof(T)) return Short();
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), in_.data(), n * sizeof(T));
    in_.remove_prefix(n * sizeof(T));
    return absl::OkStatus();
  }
  bool done() const { return in_.empty(); }

 private:
  static absl::Status Short() {
    return absl::DataLossError("rank command: a length runs past the end of its bytes");
  }
  absl::string_view in_;
};

void PutPlan(const StepPlan& p, Writer& w) {
  w.PutVector(p.tokens);
  w.PutVector(p.seq_of_token);
  w.PutVector(p.pos_of_token);
  w.PutVector(p.seq_slots);
  w.Put<uint64_t>(p.seq_pages.size());
  for (const auto& pages : p.seq_pages) w.PutVector(pages);
  w.PutVector(p.logit_tokens);
  w.PutVector(p.plane_of_token);
  w.PutVector(p.rope_of_token);
  w.PutVector(p.embedding_of_token);
  w.PutVector(p.embedding_rows ? *p.embedding_rows : std::vector<float>{});
}

absl::Status GetPlan(Reader& r, StepPlan* p) {
  RETURN_IF_ERROR(r.GetVector(&p->tokens));
  RETURN_IF_ERROR(r.GetVector(&p->seq_of_token));
  RETURN_IF_ERROR(r.GetVector(&p->pos_of_token));
  RETURN_IF_ERROR(r.GetVector(&p->seq_slots));
  uint64_t sequences = 0;
  RETURN_IF_ERROR(r.Get(&sequences));
  if (sequences != p->seq_slots.size()) {
    return absl::DataLossError(absl::StrCat("rank command: ", sequences, " page tables for ",
                                            p->seq_slots.size(), " sequences"));
  }
  p->seq_pages.resize(sequences);
  for (auto& pages : p->seq_pages) RETURN_IF_ERROR(r.GetVector(&pages));
  RETURN_IF_ERROR(r.GetVector(&p->logit_tokens));
  RETURN_IF_ERROR(r.GetVector(&p->plane_of_token));
  RETURN_IF_ERROR(r.GetVector(&p->rope_of_token));
  RETURN_IF_ERROR(r.GetVector(&p->embedding_of_token));
  auto rows = std::make_shared<std::vector<float>>();
  RETURN_IF_ERROR(r.GetVector(rows.get()));
  if (!rows->empty()) p->embedding_rows = std::move(rows);
  // What the graph indexes by: every per-token array as long as the tokens, every index in range.
  const size_t n = p->tokens.size();
  if (p->seq_of_token.size() != n || p->pos_of_token.size() != n ||
      (!p->plane_of_token.empty() && p->plane_of_token.size() != n) ||
      (!p->rope_of_token.empty() && p->rope_of_token.size() != 3 * n) ||
      (!p->embedding_of_token.empty() && p->embedding_of_token.size() != n)) {
    return absl::DataLossError("rank command: a per-token array does not match the tokens");
  }
  for (int32_t s : p->seq_of_token) {
    if (s < 0 || static_cast<size_t>(s) >= sequences) {
      return absl::DataLossError(
          absl::StrCat("rank command: token of sequence ", s, " of ", sequences));
    }
  }
  for (int32_t t : p->logit_tokens) {
    if (t < 0 || static_cast<size_t>(t) >= n) {
      return absl::DataLossError(absl::StrCat("rank command: logits of token ", t, " of ", n));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeRankCommand(const RankCommand& c) {
  Writer w;
  w.Put(kMagic);
  w.Put(static_cast<uint32_t>(c.kind));
  switch (c.kind) {
    case RankCommand::Kind::kAllocateCaches:
      w.Put(c.pages);
      w.Put(c.page_size);
      w.Put(c.slots);
      w.Put(static_cast<uint32_t>(c.kv_dtype));
      break;
    case RankCommand::Kind::kCopy:
      w.Put(c.copy);
      break;
    case RankCommand::Kind::kStep:
      PutPlan(c.plan, w);
      break;
    case RankCommand::Kind::kStop:
      break;
  }
  return w.Take();
}

absl::StatusOr<RankCommand> DecodeRankCommand(absl::string_view bytes) {
  Reader r(bytes);
  uint32_t magic = 0, kind = 0;
  RETURN_IF_ERROR(r.Get(&magic));
  if (magic != kMagic) return absl::DataLossError("rank command: not a walsh rank command");
  RETURN_IF_ERROR(r.Get(&kind));
  RankCommand c;
  c.kind = static_cast<RankCommand::Kind>(kind);
  switch (c.kind) {
    case RankCommand::Kind::kAllocateCaches: {
      uint32_t dtype = 0;
      RETURN_IF_ERROR(r.Get(&c.pages));
      RETURN_IF_ERROR(r.Get(&c.page_size));
      RETURN_IF_ERROR(r.Get(&c.slots));
      RETURN_IF_ERROR(r.Get(&dtype));
      if (dtype > static_cast<uint32_t>(KvCacheDtype::kF32) || c.pages < 0 ||
          c.pages > kMaxCacheUnits || c.page_size < 1 || c.page_size > kMaxPageSize ||
          c.slots < 0 || c.slots > kMaxCacheUnits) {
        return absl::DataLossError("rank command: cache sizes out of range");
      }
      c.kv_dtype = static_cast<KvCacheDtype>(dtype);
      break;
    }
    case RankCommand::Kind::kCopy:
      RETURN_IF_ERROR(r.Get(&c.copy));
      break;
    case RankCommand::Kind::kStep:
      RETURN_IF_ERROR(GetPlan(r, &c.plan));
      break;
    case RankCommand::Kind::kStop:
      break;
    default:
      return absl::DataLossError(absl::StrCat("rank command: unknown kind ", kind));
  }
  if (!r.done()) return absl::DataLossError("rank command: bytes left over after its end");
  return c;
}

absl::Status SendRankCommand(Communicator& comm, const RankCommand& command,
                             std::chrono::milliseconds timeout) {
  std::string bytes = EncodeRankCommand(command);
  uint64_t length = bytes.size();
  RETURN_IF_ERROR(comm.Broadcast(0, 0, &length, sizeof(length), timeout));
  return comm.Broadcast(0, 0, bytes.data(), bytes.size(), timeout);
}

absl::StatusOr<RankCommand> ReceiveRankCommand(Communicator& comm, int rank,
                                               std::chrono::milliseconds timeout) {
  uint64_t length = 0;
  RETURN_IF_ERROR(comm.Broadcast(rank, 0, &length, sizeof(length), timeout));
  if (length > kMaxCommandBytes) {
    return absl::DataLossError(absl::StrCat("rank command of ", length, " bytes"));
  }
  std::string bytes(length, '\0');
  RETURN_IF_ERROR(comm.Broadcast(rank, 0, bytes.data(), bytes.size(), timeout));
  return DecodeRankCommand(bytes);
}

}  // namespace walsh
