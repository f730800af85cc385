#include "worker/server/model_info.h"

#include "absl/strings/match.h"
#include "common/sha256.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_keys.h"
#include "worker/model/gguf_writer.h"

namespace walsh {

std::string ContractFingerprint(const GgufFile& file) {
  // The metadata that defines the math and the text (a projector's: its clip.* keys), serialized
  // canonically as a GGUF header.
  GgufWriter meta;
  for (const auto& [key, value] : file.kvs()) {
    if (absl::StartsWith(key, gguf_keys::kPrismHadamardPrefix) ||
        absl::StartsWith(key, gguf_keys::kTokenizerPrefix) ||
        absl::StartsWith(key, gguf_keys::kQwen35Prefix) ||
        absl::StartsWith(key, gguf_keys::kClipPrefix) || key == gguf_keys::kGeneralArchitecture) {
      meta.SetKv(key, value);
    }
  }
  Sha256 h;
  auto header = meta.WriteString(
      [](size_t, const GgufTensorSpec&, GgufByteSink&) { return absl::OkStatus(); });
  if (header.ok()) h.Update(header->data(), header->size());
  for (const GgufTensorInfo& t : file.tensors()) {
    h.Update(t.name.data(), t.name.size());
    h.Update(&t.type, sizeof t.type);
    for (uint64_t d : t.ne) h.Update(&d, sizeof d);
    h.Update(t.data, t.n_bytes);
  }
  return h.HexDigest();
}

std::string FingerprintWithProjector(const std::string& text, const GgufFile& projector) {
  Sha256 h;
  h.Update(text.data(), text.size());
  const std::string vision = ContractFingerprint(projector);
  h.Update(vision.data(), vision.size());
  return h.HexDigest();
}

v1::ModelInfo BuildModelInfo(const ModelFile& file, const Tokenizer* tokenizer, int64_t max_context,
                             int64_t max_output_tokens, const std::string& fingerprint) {
  v1::ModelInfo info;
  info.set_architecture("qwen35");
  info.add_modalities("text");
  const GgufTensorInfo* embd = file.gguf->FindTensor("token_embd.weight");
  info.set_weight_format(embd != nullptr ? GgmlTypeName(embd->type) : "");
  info.set_layers(static_cast<uint32_t>(file.config.block_count));
  info.set_hidden_size(static_cast<uint32_t>(file.config.embedding_length));
  info.set_vocab_size(static_cast<uint32_t>(file.config.vocab_size));
  info.set_max_context(static_cast<uint32_t>(max_context));
  info.set_max_output_tokens(static_cast<uint32_t>(max_output_tokens));
  info.set_bos_token_id(tokenizer != nullptr ? tokenizer->bos_id() : -1);
  if (tokenizer != nullptr) {
    for (int32_t id : tokenizer->eos_ids()) info.add_eos_token_ids(id);
  }
  info.set_contract_fingerprint(fingerprint);
  if (auto name = file.gguf->GetString(gguf_keys::kGeneralName); name.ok()) info.set_name(*name);
  return info;
}

}  // namespace walsh
