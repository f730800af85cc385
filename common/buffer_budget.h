// The bytes one process holds for clients that have not read them yet, against its overload
// limit (--max-buffered-total). Each stream is bounded on its own (--max-buffered-bytes); this
// bounds their sum where it can be bounded without losing what was accepted: once it is reached,
// new streams are refused by name and the streams already running keep their own bounds.
// Thread-safe; every stream's writer adds and releases its bytes here.
#ifndef WALSH_COMMON_BUFFER_BUDGET_H_
#define WALSH_COMMON_BUFFER_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace walsh {

class BufferBudget {
 public:
  // `holder` names the process in refusals ("the gateway", "the worker"); limit 0: no limit.
  BufferBudget(std::string holder, int64_t limit) : holder_(std::move(holder)), limit_(limit) {}

  void Add(int64_t bytes) { used_.fetch_add(bytes, std::memory_order_relaxed); }
  void Release(int64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }
  int64_t refusals() const { return refusals_.load(std::memory_order_relaxed); }

  // OK while under the limit; otherwise RESOURCE_EXHAUSTED naming --max-buffered-total, and the
  // refusal is counted.
  absl::Status AdmitStream();

 private:
  const std::string holder_;
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> refusals_{0};
};

}  // namespace walsh

#endif  // WALSH_COMMON_BUFFER_BUDGET_H_
