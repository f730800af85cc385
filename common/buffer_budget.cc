#include "common/buffer_budget.h"

#include "absl/strings/str_cat.h"

namespace walsh {

absl::Status BufferBudget::AdmitStream() {
  const int64_t used = this->used();
  if (limit_ <= 0 || used < limit_) return absl::OkStatus();
  refusals_.fetch_add(1, std::memory_order_relaxed);
  return absl::ResourceExhaustedError(
      absl::StrCat(holder_, " holds ", used, " bytes for clients that have not read them (",
                   "--max-buffered-total ", limit_, "): try again later"));
}

}  // namespace walsh
