// The flags that bound what a process buffers for gRPC clients that do not read, the same in
// walsh-gateway and walsh-worker (docs/operations.md §Slow clients): per stream in bytes, the
// stall timeout, and the process's total.
#ifndef WALSH_COMMON_STREAM_BUFFER_FLAGS_H_
#define WALSH_COMMON_STREAM_BUFFER_FLAGS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/buffer_budget.h"
#include "common/cli_flags.h"
#include "common/stream_writer.h"

namespace walsh {

struct StreamBufferFlags {
  int64_t max_bytes = 256 << 10;
  int64_t max_total = 64 << 20;
  int64_t stall_timeout_seconds = 30;

  void Register(FlagSet& flags);
  // Every flag's range checked; the error names the flag.
  absl::Status Validate() const;
  StreamBufferLimits Limits(BufferBudget* budget) const;
};

}  // namespace walsh

#endif  // WALSH_COMMON_STREAM_BUFFER_FLAGS_H_
