// libFuzzer target: a follower's view of the leader's command bytes (rank_command.h). Invariants:
// decoding never reads past the bytes or crashes; what decodes re-encodes to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_input.h"
#include "worker/engine/rank_command.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace walsh;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<RankCommand> command = DecodeRankCommand(bytes);
  if (!command.ok()) {
    if (command.status().code() != absl::StatusCode::kDataLoss) {
      fuzz::Violated("damaged bytes were not DATA_LOSS");
    }
    return 0;
  }
  if (EncodeRankCommand(*command) != bytes) fuzz::Violated("a command did not round-trip");
  return 0;
}
