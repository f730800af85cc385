#include "worker/server/rank_group.h"

#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/json_log.h"
#include "common/mutex.h"
#include "gloo/rendezvous/store.h"
#include "grpcpp/grpcpp.h"
#include "walsh/v1/rank_group.grpc.pb.h"
#include "worker/parallel/gloo_communicator.h"

namespace walsh {
namespace {

using Clock = std::chrono::steady_clock;

// The leader's store: gloo's rendezvous keys, and which followers have joined. gloo calls it from
// the leader's own rank; the handshake service from the followers'.
class LeaderStore final : public gloo::rendezvous::Store {
 public:
  explicit LeaderStore(const RankGroupOptions& leader) : leader_(leader) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    MutexLock l(&mu_);
    values_[key] = data;
    cv_.SignalAll();
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, kDefaultTimeout);
    MutexLock l(&mu_);
    return values_.at(key);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    if (!WaitFor(keys, Clock::now() + timeout)) {
      throw std::runtime_error(absl::StrCat("rendezvous keys not set within ", timeout.count(),
                                            " ms: ", absl::StrJoin(keys, ", ")));
    }
  }

  // Whether every key was set by `deadline` (false at once once the store is closed).
  bool WaitFor(const std::vector<std::string>& keys, Clock::time_point deadline) {
    MutexLock l(&mu_);
    for (;;) {
      bool all = true;
      for (const std::string& k : keys) all = all && values_.contains(k);
      if (all) return true;
      if (closed_) return false;
      const auto left = deadline - Clock::now();
      if (left <= left.zero()) return false;
      cv_.WaitWithTimeout(&mu_, absl::FromChrono(left));
    }
  }
  std::vector<std::string> Values(const std::vector<std::string>& keys) {
    MutexLock l(&mu_);
    std::vector<std::string> out;
    for (const std::string& k : keys) out.emplace_back(values_[k].begin(), values_[k].end());
    return out;
  }

  grpc::Status Join(const v1::JoinRequest& in) {
    auto refuse = [&](const std::string& what) {
      const std::string message = absl::StrCat("rank ", in.rank(), " cannot join: ", what);
      LogJson("warning", "rank_refused", {{"rank", in.rank()}, {"error", message}});
      MutexLock l(&mu_);
      refusals_.push_back(message);
      cv_.SignalAll();
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, message);
    };
    if (in.size() != leader_.size) {
      return refuse(
          absl::StrCat("it is one of ", in.size(), " ranks, the leader's group of ", leader_.size));
    }
    if (in.rank() < 1 || in.rank() >= leader_.size) {
      return refuse(absl::StrCat("ranks 1..", leader_.size - 1, " follow"));
    }
    if (in.contract_fingerprint() != leader_.contract_fingerprint) {
      return refuse(absl::StrCat("its model's fingerprint ", in.contract_fingerprint(),
                                 " is not the leader's ", leader_.contract_fingerprint));
    }
    if (in.shard_plan() != leader_.shard_plan) {
      return refuse("its shard plan is not the leader's (the same model and --tp split alike)");
    }
    MutexLock l(&mu_);
    if (!joined_.insert(in.rank()).second) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          absl::StrCat("rank ", in.rank(), " has joined already"));
    }
    LogJson("info", "rank_joined", {{"rank", in.rank()}, {"size", leader_.size}});
    cv_.SignalAll();
    return grpc::Status::OK;
  }

  // OK once every follower joined; otherwise, at the first refusal (a refused rank does not
  // come back) or the deadline, names the ranks missing and why.
  absl::Status WaitForFollowers(Clock::time_point deadline) {
    MutexLock l(&mu_);
    while (static_cast<int>(joined_.size()) < leader_.size - 1 && refusals_.empty()) {
      const auto left = deadline - Clock::now();
      if (left <= left.zero()) break;
      cv_.WaitWithTimeout(&mu_, absl::FromChrono(left));
    }
    if (static_cast<int>(joined_.size()) == leader_.size - 1) return absl::OkStatus();
    std::vector<int> missing;
    for (int r = 1; r < leader_.size; ++r) {
      if (!joined_.contains(r)) missing.push_back(r);
    }
    if (!refusals_.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("rank(s) ", absl::StrJoin(missing, ", "),
                                                        " did not join: ", refusals_.front()));
    }
    return absl::DeadlineExceededError(absl::StrCat("rank(s) ", absl::StrJoin(missing, ", "),
                                                    " did not join within ",
                                                    leader_.timeout.count(), " ms"));
  }

  // Ends every wait: the handshake is over.
  void Close() {
    MutexLock l(&mu_);
    closed_ = true;
    cv_.SignalAll();
  }

 private:
  const RankGroupOptions leader_;
  Mutex mu_;
  CondVar cv_;
  std::map<std::string, std::vector<char>> values_ ABSL_GUARDED_BY(mu_);
  std::set<int> joined_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> refusals_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

class RankGroupService final : public v1::RankGroup::Service {
 public:
  explicit RankGroupService(LeaderStore* store) : store_(store) {}
  grpc::Status Join(grpc::ServerContext*, const v1::JoinRequest* in, v1::JoinResponse*) override {
    return store_->Join(*in);
  }
  grpc::Status StoreSet(grpc::ServerContext*, const v1::StoreSetRequest* in,
                        v1::StoreSetResponse*) override {
    store_->set(in->key(), std::vector<char>(in->value().begin(), in->value().end()));
    return grpc::Status::OK;
  }
  grpc::Status StoreGet(grpc::ServerContext* ctx, const v1::StoreGetRequest* in,
                        v1::StoreGetResponse* out) override {
    const std::vector<std::string> keys(in->keys().begin(), in->keys().end());
    const auto wait = std::min(ctx->deadline() - std::chrono::system_clock::now(),
                               std::chrono::system_clock::duration(std::chrono::minutes(10)));
    if (!store_->WaitFor(keys, Clock::now() + wait)) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("keys not set: ", absl::StrJoin(keys, ", ")));
    }
    for (std::string& v : store_->Values(keys)) out->add_values(std::move(v));
    return grpc::Status::OK;
  }

 private:
  LeaderStore* store_;
};

// A follower's view of the leader's store, over the handshake.
class RemoteStore final : public gloo::rendezvous::Store {
 public:
  RemoteStore(std::shared_ptr<grpc::Channel> channel, std::chrono::milliseconds timeout)
      : stub_(v1::RankGroup::NewStub(channel)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    grpc::ClientContext ctx;
    Prepare(ctx, timeout_);
    v1::StoreSetRequest in;
    in.set_key(key);
    in.set_value(std::string(data.begin(), data.end()));
    v1::StoreSetResponse out;
    Check(stub_->StoreSet(&ctx, in, &out), "set", key);
  }
  std::vector<char> get(const std::string& key) override {
    const std::vector<std::string> values = Get({key}, timeout_);
    return std::vector<char>(values[0].begin(), values[0].end());
  }
  void wait(const std::vector<std::string>& keys) override { Get(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    Get(keys, timeout);
  }

 private:
  static void Prepare(grpc::ClientContext& ctx, std::chrono::milliseconds timeout) {
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  }
  static void Check(const grpc::Status& s, const char* what, const std::string& key) {
    if (!s.ok()) {
      throw std::runtime_error(
          absl::StrCat("the leader's store could not ", what, " '", key, "': ", s.error_message()));
    }
  }
  std::vector<std::string> Get(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) {
    grpc::ClientContext ctx;
    Prepare(ctx, timeout);
    v1::StoreGetRequest in;
    for (const std::string& k : keys) in.add_keys(k);
    v1::StoreGetResponse out;
    Check(stub_->StoreGet(&ctx, in, &out), "get", absl::StrJoin(keys, ", "));
    return std::vector<std::string>(out.values().begin(), out.values().end());
  }

  std::unique_ptr<v1::RankGroup::Stub> stub_;
  const std::chrono::milliseconds timeout_;
};

// The port of host:port (the last colon's, so a bracketed IPv6 host works).
absl::StatusOr<std::string> PortOf(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon + 1 == addr.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dist-init-addr must be host:port (got '", addr, "')"));
  }
  return addr.substr(colon + 1);
}

absl::StatusOr<ProcessGroup> Connected(absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm,
                                       int rank, std::chrono::milliseconds timeout) {
  if (!comm.ok()) return comm.status();
  // Every rank connected to every other before the handshake may stop.
  if (absl::Status s = (*comm)->Barrier(rank, timeout); !s.ok()) return s;
  return ProcessGroup{.rank = rank, .comm = *std::move(comm)};
}

absl::StatusOr<ProcessGroup> Lead(const RankGroupOptions& o) {
  absl::StatusOr<std::string> port = PortOf(o.init_addr);
  if (!port.ok()) return port.status();
  LeaderStore store(o);
  RankGroupService service(&store);
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("0.0.0.0:", *port), grpc::InsecureServerCredentials(),
                           &bound);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on port ", *port, " of --dist-init-addr ", o.init_addr));
  }
  LogJson("info", "rank_group_listening", {{"port", bound}, {"size", o.size}});
  const auto deadline = Clock::now() + o.timeout;
  absl::Status joined = store.WaitForFollowers(deadline);
  absl::StatusOr<ProcessGroup> group =
      joined.ok()
          ? Connected(GlooCommunicator::Connect(store, 0, o.size, o.host, o.timeout), 0, o.timeout)
          : absl::StatusOr<ProcessGroup>(joined);
  store.Close();  // a follower's StoreGet still waiting returns now, so Shutdown does not wait
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return group;
}

absl::StatusOr<ProcessGroup> Follow(const RankGroupOptions& o) {
  auto channel = grpc::CreateChannel(o.init_addr, grpc::InsecureChannelCredentials());
  {
    auto stub = v1::RankGroup::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() + o.timeout);
    v1::JoinRequest in;
    in.set_rank(o.rank);
    in.set_size(o.size);
    in.set_contract_fingerprint(o.contract_fingerprint);
    in.set_shard_plan(o.shard_plan);
    v1::JoinResponse out;
    const grpc::Status s = stub->Join(&ctx, in, &out);
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat("rank ", o.rank, " could not join the leader at ",
                                                 o.init_addr, ": ", s.error_message()));
    }
  }
  RemoteStore store(channel, o.timeout);
  return Connected(GlooCommunicator::Connect(store, o.rank, o.size, o.host, o.timeout), o.rank,
                   o.timeout);
}

}  // namespace

absl::StatusOr<ProcessGroup> FormRankGroup(const RankGroupOptions& options) {
  if (options.size < 2 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " of a group of ", options.size));
  }
  return options.rank == 0 ? Lead(options) : Follow(options);
}

}  // namespace walsh
