#include "common/stream_buffer_flags.h"

namespace walsh {

void StreamBufferFlags::Register(FlagSet& flags) {
  flags.Int("max-buffered-bytes", &max_bytes,
            "response bytes a stream may hold for a client that does not read; when full, the "
            "stream's producer pauses (a worker stops decoding it, the gateway stops reading its "
            "worker) until half has drained");
  flags.Int("stall-timeout-seconds", &stall_timeout_seconds,
            "a stream whose client reads nothing this long while a response waits is cancelled "
            "(its slot freed) and ends RESOURCE_EXHAUSTED; 0: never");
  flags.Int("max-buffered-total", &max_total,
            "response bytes all streams together may hold for their clients; while reached, new "
            "streams are refused RESOURCE_EXHAUSTED (HTTP 429); 0: no limit");
}

absl::Status StreamBufferFlags::Validate() const {
  if (max_bytes < 1024) {
    return absl::InvalidArgumentError("--max-buffered-bytes must be at least 1024");
  }
  if (max_total < 0) return absl::InvalidArgumentError("--max-buffered-total must be at least 0");
  if (stall_timeout_seconds < 0) {
    return absl::InvalidArgumentError("--stall-timeout-seconds must be at least 0");
  }
  return absl::OkStatus();
}

StreamBufferLimits StreamBufferFlags::Limits(BufferBudget* budget) const {
  return {.max_bytes = max_bytes,
          .stall_timeout = std::chrono::seconds(stall_timeout_seconds),
          .budget = budget};
}

}  // namespace walsh
