#include "worker/parallel/gloo_communicator.h"

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gloo/allgatherv.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace walsh {

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Connect(
    gloo::rendezvous::Store& store, int rank, int size, const std::string& hostname,
    std::chrono::milliseconds timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of a group of ", size));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);
    return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(std::move(context), rank, size));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "rank ", rank, " of ", size, " could not join its tensor-parallel group: ", e.what()));
  }
}

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::Context> context, int rank, int size)
    : context_(std::move(context)), rank_(rank), size_(size) {}

GlooCommunicator::~GlooCommunicator() = default;

template <typename F>
absl::Status GlooCommunicator::Guard(const char* what, int rank, F&& collective) {
  if (rank != rank_) {
    return absl::InternalError(
        absl::StrCat("rank ", rank, " called the communicator of rank ", rank_));
  }
  if (broken()) {
    return absl::UnavailableError(absl::StrCat(
        "rank ", rank_, ": the tensor-parallel group is broken by an earlier failure"));
  }
  try {
    collective();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    broken_.store(true, std::memory_order_release);
    return absl::UnavailableError(
        absl::StrCat("rank ", rank_, " of ", size_, ": ", what, " failed: ", e.what()));
  }
}

absl::Status GlooCommunicator::Barrier(int rank, std::chrono::milliseconds timeout) {
  return Guard("barrier", rank, [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(timeout);
    gloo::barrier(opts);
  });
}

absl::Status GlooCommunicator::AllGatherInPlace(int rank, float* buffer,
                                                const std::vector<size_t>& offsets,
                                                const std::vector<size_t>& counts,
                                                std::chrono::milliseconds timeout) {
  if (offsets.size() != static_cast<size_t>(size_) || counts.size() != offsets.size()) {
    return absl::InternalError(
        absl::StrCat("all-gather of ", offsets.size(), " parts over ", size_, " ranks"));
  }
  // gloo gathers rank after rank into one range: the parts must tile it in rank order.
  for (int r = 1; r < size_; ++r) {
    if (offsets[r] != offsets[r - 1] + counts[r - 1]) {
      return absl::InternalError(
          absl::StrCat("all-gather parts are not laid out rank after rank (rank ", r, ")"));
    }
  }
  return Guard("all-gather", rank, [&] {
    gloo::AllgathervOptions opts(context_);
    opts.setOutput(buffer + offsets[0], counts);  // no input: this rank's part is in place
    opts.setTimeout(timeout);
    gloo::allgatherv(opts);
  });
}

absl::Status GlooCommunicator::AllReduceSum(int rank, float* buffer, size_t count,
                                            std::chrono::milliseconds timeout) {
  const absl::Status s = Guard("all-reduce", rank, [&] {
    gathered_.assign(count * size_, 0.0f);
    std::copy(buffer, buffer + count, gathered_.begin() + count * rank_);
    gloo::AllgathervOptions opts(context_);
    opts.setOutput(gathered_.data(), std::vector<size_t>(size_, count));
    opts.setTimeout(timeout);
    gloo::allgatherv(opts);
  });
  if (!s.ok()) return s;
  for (size_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (int r = 0; r < size_; ++r) sum += gathered_[r * count + i];
    buffer[i] = sum;
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Broadcast(int rank, int root, void* buffer, size_t bytes,
                                         std::chrono::milliseconds timeout) {
  if (root < 0 || root >= size_) {
    return absl::InternalError(absl::StrCat("broadcast from rank ", root, " of ", size_));
  }
  if (bytes == 0) return absl::OkStatus();
  return Guard("broadcast", rank, [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<char*>(buffer), bytes);
    opts.setRoot(root);
    opts.setTimeout(timeout);
    gloo::broadcast(opts);
  });
}

}  // namespace walsh
