// libFuzzer target: arbitrary bytes through the GGUF reader, the whole model validation and the
// vision projector's (mmproj) checks. Anything may be refused; nothing may crash, hang or read out
// of bounds.
#include <cstddef>
#include <cstdint>

#include "worker/model/mmproj_config.h"
#include "worker/model/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = walsh::GgufFile::Parse(data, size);
  if (!file.ok()) return 0;
  // Touch the first and last byte of every tensor the reader vouched for.
  volatile uint8_t sink = 0;
  for (const walsh::GgufTensorInfo& t : (*file)->tensors()) {
    if (t.n_bytes > 0) sink = sink ^ t.data[0] ^ t.data[t.n_bytes - 1];
  }
  if (auto projector = walsh::ParseMmprojConfig(**file); projector.ok()) {
    (void)walsh::CheckMmprojInventory(**file, *projector);
  }
  (void)walsh::ValidateModelFile(std::move(*file));
  return 0;
}
