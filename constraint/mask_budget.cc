#include "constraint/mask_budget.h"

#include "absl/strings/str_cat.h"
#include "common/final_status.h"

namespace walsh {

MaskBudget::MaskBudget(const MaskLimits& limits, const std::atomic<bool>* cancelled,
                       const std::atomic<bool>* abandoned)
    : limit_(limits.work), time_(limits.time), cancelled_(cancelled), abandoned_(abandoned) {
  if (time_.count() > 0) deadline_ = std::chrono::steady_clock::now() + time_;
}

bool MaskBudget::Check() {
  checked_at_ = used_;
  if (limit_ > 0 && used_ > limit_) {
    spent_ = Spent::kWork;
  } else if ((cancelled_ != nullptr && cancelled_->load(std::memory_order_relaxed)) ||
             (abandoned_ != nullptr && abandoned_->load(std::memory_order_relaxed))) {
    spent_ = Spent::kCancelled;
  } else if (time_.count() > 0 && std::chrono::steady_clock::now() >= deadline_) {
    spent_ = Spent::kTime;
  }
  return spent_ == Spent::kNo;
}

absl::Status MaskBudget::status() const {
  switch (spent_) {
    case Spent::kNo:
      return absl::OkStatus();
    case Spent::kWork:  // the same work on any worker: final, never retried elsewhere
      return Final(absl::ResourceExhaustedError(absl::StrCat(
          "constraint: one token's mask needs more than ", limit_,
          " units of automaton work (--constraint-mask-work); simplify the schema, regex or "
          "grammar (nested optional repetitions are the usual cause)")));
    case Spent::kTime:
      return absl::ResourceExhaustedError(absl::StrCat(
          "constraint: one token's mask took more than ", time_.count(),
          " ms (--constraint-mask-timeout-ms); simplify the schema, regex or grammar"));
    case Spent::kCancelled:
      return absl::CancelledError("cancelled");
  }
  return absl::OkStatus();
}

}  // namespace walsh
