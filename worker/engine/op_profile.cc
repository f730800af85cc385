#include "worker/engine/op_profile.h"

#include <algorithm>

namespace walsh {

void OpProfile::Add(const char* op, std::chrono::nanoseconds elapsed) {
  absl::MutexLock lock(&mu_);
  auto it =
      std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.op == op; });
  if (it == entries_.end()) it = entries_.insert(entries_.end(), Entry{op});
  ++it->calls;
  it->seconds += std::chrono::duration<double>(elapsed).count();
}

std::vector<OpProfile::Entry> OpProfile::Entries() const {
  absl::MutexLock lock(&mu_);
  std::vector<Entry> out = entries_;
  std::sort(out.begin(), out.end(),
            [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
  return out;
}

void OpProfile::Reset() {
  absl::MutexLock lock(&mu_);
  entries_.clear();
}

}  // namespace walsh
