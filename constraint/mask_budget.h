// What one token's constraint work may cost: computing its mask, or advancing the automaton past
// it (docs/structured_output.md §Bounds). A budget counts work units (stack elements expanded,
// trie nodes walked), has a deadline, and ends early when the request is cancelled; once spent
// it stays spent, and what was computed under it is thrown away, never cached. The work bound
// makes the verdict the same on any machine; the deadline is the backstop for a slow one.
#ifndef WALSH_CONSTRAINT_MASK_BUDGET_H_
#define WALSH_CONSTRAINT_MASK_BUDGET_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "absl/status/status.h"

namespace walsh {

struct MaskLimits {
  // The defaults: nearly a second of one core's matching for the work (about 150 million units
  // a second on the development VM, bench/RESULTS.md), far past a real schema's cold mask (about
  // 2 ms at the 27B shape's vocabulary); the time bound backs it on a slow or loaded machine.
  static constexpr int64_t kDefaultWork = int64_t{1} << 27;
  static constexpr int64_t kDefaultMilliseconds = 1000;

  int64_t work = kDefaultWork;                           // <= 0: unbounded
  std::chrono::milliseconds time{kDefaultMilliseconds};  // <= 0: none
};

class MaskBudget {
 public:
  // No bound at all (tools, tests, and what the caller bounds otherwise).
  MaskBudget() = default;
  // `cancelled` and `abandoned` (optional; either set ends the work) outlive the budget.
  explicit MaskBudget(const MaskLimits& limits, const std::atomic<bool>* cancelled = nullptr,
                      const std::atomic<bool>* abandoned = nullptr);

  // Charges `units`; false once the budget is spent (and from then on).
  bool Spend(int64_t units) {
    if (spent_ != Spent::kNo) return false;
    used_ += units;
    if (used_ - checked_at_ < kCheckEvery && (limit_ <= 0 || used_ <= limit_)) return true;
    return Check();
  }
  bool spent() const { return spent_ != Spent::kNo; }
  int64_t used() const { return used_; }
  // OK while unspent; else RESOURCE_EXHAUSTED naming the bound it ran past (and its flag), or
  // CANCELLED.
  absl::Status status() const;

 private:
  enum class Spent { kNo, kWork, kTime, kCancelled };
  // The clock and the cancel flag are read every kCheckEvery units, not on every one.
  static constexpr int64_t kCheckEvery = 1 << 14;
  bool Check();

  int64_t limit_ = 0;
  std::chrono::milliseconds time_{0};
  std::chrono::steady_clock::time_point deadline_{};
  const std::atomic<bool>* cancelled_ = nullptr;
  const std::atomic<bool>* abandoned_ = nullptr;
  int64_t used_ = 0;
  int64_t checked_at_ = 0;
  Spent spent_ = Spent::kNo;
};

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_MASK_BUDGET_H_
