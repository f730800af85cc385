#include "worker/speculative/draft_backoff.h"

#include <algorithm>

namespace walsh {

bool DraftsThisStep(DraftBackoff& b) {
  if (b.paused == 0) return true;
  --b.paused;
  return false;
}

void RecordVerification(DraftBackoff& b, int64_t drafted, int64_t accepted, double min_acceptance) {
  if (drafted <= 0) return;
  b.acceptance =
      0.75 * b.acceptance + 0.25 * static_cast<double>(accepted) / static_cast<double>(drafted);
  if (b.acceptance < min_acceptance) {
    b.pause = std::clamp<int64_t>(2 * b.pause, 4, 64);
    b.paused = b.pause;
    b.acceptance = min_acceptance;
  } else if (b.acceptance > (1.0 + min_acceptance) / 2) {
    b.pause = 0;
  }
}

}  // namespace walsh
