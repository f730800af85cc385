// What GetModelInfo reports, including the contract fingerprint: sha256 over the Prism contract
// and tokenizer metadata and over every tensor's name, type, shape and bytes. Two workers with
// equal fingerprints serve the same model.
#ifndef WALSH_WORKER_SERVER_MODEL_INFO_H_
#define WALSH_WORKER_SERVER_MODEL_INFO_H_

#include <string>

#include "walsh/v1/generator.pb.h"
#include "worker/model/model_file.h"
#include "worker/model/tokenizer.h"

namespace walsh {

std::string ContractFingerprint(const GgufFile& file);

// A worker with a vision projector (--mmproj): sha256 over the text model's fingerprint and the
// projector's (ContractFingerprint of its file: its clip.* keys and its tensors).
std::string FingerprintWithProjector(const std::string& text, const GgufFile& projector);

v1::ModelInfo BuildModelInfo(const ModelFile& file, const Tokenizer* tokenizer, int64_t max_context,
                             int64_t max_output_tokens, const std::string& fingerprint);

}  // namespace walsh

#endif  // WALSH_WORKER_SERVER_MODEL_INFO_H_
