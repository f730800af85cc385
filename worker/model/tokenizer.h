// Byte-level BPE tokenizer from a GGUF's tokenizer.ggml.* arrays (docs/format.md §9): the GPT-2
// byte <-> unicode mapping, merges ranked by index, special and user-defined tokens matched
// as whole strings before BPE, NFC normalization (as the Hugging Face tokenizer of these
// models does) and the qwen2 / qwen35 pre-tokenizer split, with ICU for Unicode classes.
#ifndef WALSH_WORKER_MODEL_TOKENIZER_H_
#define WALSH_WORKER_MODEL_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/gguf_file.h"

namespace walsh {

// A part of a prompt rendered by a template: special tokens written in it are recognized only
// when it is `markup` (the template's own text), never in text a user wrote.
struct PromptPiece {
  std::string text;
  bool markup = false;
};

class Tokenizer {
 public:
  // Refuses a model it cannot tokenize exactly (unknown tokenizer.ggml.model or .pre), naming
  // the key.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  ~Tokenizer();

  // Text (any bytes; ill-formed UTF-8 becomes U+FFFD) to ids. Special tokens written in the
  // text are recognized when `parse_special`; BOS is prepended when the file asks for it.
  // `max_tokens` as for pieces, below.
  std::vector<int32_t> Encode(absl::string_view text, bool parse_special = true,
                              size_t max_tokens = SIZE_MAX) const;
  // The pieces' concatenation, with special tokens recognized only inside markup (neighbouring
  // markup pieces count as one): the same ids as Encode of the whole text as long as no special
  // token lies in, or spans the edge of, a text piece.
  // `max_tokens`: stop as soon as the text is known to need more than this many ids; the
  // result then holds more than `max_tokens` entries, not all of them ids (enough to refuse a
  // prompt that cannot fit without tokenizing all of it).
  std::vector<int32_t> Encode(const std::vector<PromptPiece>& pieces,
                              size_t max_tokens = SIZE_MAX) const;
  // The pre-tokenizer's pieces of (NFC-normalized) text, before BPE.
  std::vector<std::string> Split(absl::string_view text) const;
  // The bytes of one token (special tokens as their text). Out-of-range ids give "".
  std::string TokenBytes(int32_t id) const;
  std::string Decode(const std::vector<int32_t>& ids) const;

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::string& pre() const { return pre_; }
  int32_t FindToken(absl::string_view text) const;  // -1 if absent
  bool IsSpecial(int32_t id) const;  // control or user-defined: matched whole in text
  bool IsControl(int32_t id) const;
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  int32_t bos_id() const { return bos_id_; }
  bool add_bos() const { return add_bos_; }

 private:
  Tokenizer();
  void EncodePiece(const std::string& piece, std::vector<int32_t>& out) const;
  // Well-formed UTF-8 `text` whose special tokens are recognized only inside the sorted,
  // disjoint byte ranges `markup`.
  std::vector<int32_t> EncodeSanitized(const std::string& text,
                                       const std::vector<std::pair<size_t, size_t>>& markup,
                                       size_t max_tokens) const;
  // `text` is already well-formed UTF-8 (Encode sanitized it once).
  void EncodeText(const std::string& text, std::vector<int32_t>& out,
                  size_t max_tokens = SIZE_MAX) const;
  std::vector<std::string> SplitValidUtf8(const std::string& text) const;

  std::string pre_;
  std::vector<std::string> tokens_;
  std::vector<int32_t> types_;
  absl::flat_hash_map<std::string, int32_t> token_ids_;
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>>
      merges_;                                             // (left, right) -> (rank, id)
  std::vector<std::pair<std::string, int32_t>> specials_;  // longest first
  bool special_first_byte_[256] = {};                      // some special starts with it
  size_t max_token_bytes_ = 1;                             // the longest ordinary token's bytes
  int32_t byte_token_[256];
  std::vector<int32_t> eos_ids_;
  int32_t bos_id_ = -1;
  bool add_bos_ = false;
  struct Icu;
  std::unique_ptr<Icu> icu_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_TOKENIZER_H_
