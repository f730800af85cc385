// A qwen35 model file that passed every check: GGUF structure, hyper-parameters, tensor
// inventory and the Prism contract. Anything less is refused at load with a named reason.
#ifndef WALSH_WORKER_MODEL_MODEL_FILE_H_
#define WALSH_WORKER_MODEL_MODEL_FILE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/gguf_file.h"
#include "worker/model/prism_contract.h"
#include "worker/model/qwen35_config.h"

namespace walsh {

struct ModelFile {
  std::unique_ptr<GgufFile> gguf;
  Qwen35Config config;
  PrismContract contract;
};

// Validates an already parsed file (takes ownership).
absl::StatusOr<ModelFile> ValidateModelFile(std::unique_ptr<GgufFile> gguf);

// Maps (or copies into huge pages: common/weights_memory.h), locks if `lock`, parses and validates
// `path`. Errors start with the path, but a refused --weights-memory or --mlock, which names the
// flag.
absl::StatusOr<ModelFile> LoadModelFile(const std::string& path,
                                        WeightsMemory memory = WeightsMemory::kMmap,
                                        bool lock = false);

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_MODEL_FILE_H_
