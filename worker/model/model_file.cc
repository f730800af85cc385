#include "worker/model/model_file.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/gguf_keys.h"

namespace walsh {

absl::StatusOr<ModelFile> ValidateModelFile(std::unique_ptr<GgufFile> gguf) {
  ModelFile m;
  ASSIGN_OR_RETURN(m.config, ParseQwen35Config(*gguf));
  ASSIGN_OR_RETURN(
      m.contract, ParsePrismContract(*gguf, m.config.ssm_group_count, m.config.ssm_time_step_rank));
  RETURN_IF_ERROR(CheckQwen35Inventory(*gguf, m.config, !m.contract.tied_output));
  if (const GgufValue* tokens = gguf->FindKey(gguf_keys::kTokenizerGgmlTokens)) {
    if (tokens->type() != GgufType::kArray || tokens->elem_type() != GgufType::kString) {
      return absl::InvalidArgumentError("key 'tokenizer.ggml.tokens' is not an ARRAY of STRING");
    }
    if (static_cast<int64_t>(tokens->elems().size()) != m.config.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("key 'tokenizer.ggml.tokens' has ", tokens->elems().size(),
                       " entries, but token_embd.weight has ", m.config.vocab_size, " rows"));
    }
  }
  m.gguf = std::move(gguf);
  return m;
}

absl::StatusOr<ModelFile> LoadModelFile(const std::string& path, WeightsMemory memory, bool lock) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(path, memory, lock));
  absl::StatusOr<ModelFile> m = ValidateModelFile(std::move(gguf));
  if (!m.ok())
    return absl::Status(m.status().code(), absl::StrCat(path, ": ", m.status().message()));
  return m;
}

}  // namespace walsh
