#include "worker/model/tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <functional>
#include <queue>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/byte_unicode.h"
#include "worker/model/gguf_keys.h"
#include "worker/model/utf8.h"

namespace walsh {
namespace {

// docs/format.md §9, with \s spelled as Unicode White_Space (the Hugging Face tokenizers' meaning).
constexpr char kQwen2Split[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\p{White_Space}\\p{L}\\p{N}]+[\\r\\n]*|\\p{White_Space}*[\\r\\n]+|"
    "\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+";
// qwen35: letters include marks (\p{M}).
constexpr char kQwen35Split[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]"
    "+|"
    "\\p{N}| ?[^\\p{White_Space}\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\p{White_Space}*[\\r\\n]+|"
    "\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+";

constexpr int32_t kTypeControl = 3, kTypeUserDefined = 4;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

std::string ToUtf8(const icu::UnicodeString& s) {
  std::string out;
  s.toUTF8String(out);
  return out;
}

}  // namespace

struct Tokenizer::Icu {
  std::unique_ptr<icu::RegexPattern> split;
  const icu::Normalizer2* nfc = nullptr;
  // The pattern is shared (ICU patterns are thread-safe); each call makes its own matcher.
};

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  ASSIGN_OR_RETURN(std::string model, file.GetString(gguf_keys::kTokenizerGgmlModel));
  if (model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat("key 'tokenizer.ggml.model' is \"", model,
                                                 "\"; walsh implements byte-level BPE (\"gpt2\")"));
  }
  ASSIGN_OR_RETURN(t->pre_, file.GetString(gguf_keys::kTokenizerGgmlPre));
  const char* pattern = nullptr;
  if (t->pre_ == "qwen35") pattern = kQwen35Split;
  if (t->pre_ == "qwen2") pattern = kQwen2Split;
  if (pattern == nullptr) {
    return absl::UnimplementedError(absl::StrCat("key 'tokenizer.ggml.pre' is \"", t->pre_,
                                                 "\"; walsh knows \"qwen35\" and \"qwen2\""));
  }
  ASSIGN_OR_RETURN(t->tokens_, file.GetStringArray(gguf_keys::kTokenizerGgmlTokens));
  if (file.FindKey(gguf_keys::kTokenizerGgmlTokenType) != nullptr) {
    ASSIGN_OR_RETURN(std::vector<int64_t> types,
                     file.GetIntArray(gguf_keys::kTokenizerGgmlTokenType));
    if (types.size() != t->tokens_.size()) {
      return absl::InvalidArgumentError(
          "key 'tokenizer.ggml.token_type' has a different length "
          "than 'tokenizer.ggml.tokens'");
    }
    t->types_.assign(types.begin(), types.end());
  } else {
    t->types_.assign(t->tokens_.size(), 1);
  }
  for (size_t i = 0; i < t->tokens_.size(); ++i) {
    t->token_ids_.emplace(t->tokens_[i], static_cast<int32_t>(i));
    if (t->types_[i] == kTypeControl || t->types_[i] == kTypeUserDefined) {
      if (!t->tokens_[i].empty()) t->specials_.emplace_back(t->tokens_[i], static_cast<int32_t>(i));
    }
  }
  std::stable_sort(t->specials_.begin(), t->specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [text, id] : t->specials_) {
    t->special_first_byte_[static_cast<unsigned char>(text[0])] = true;
  }
  for (size_t i = 0; i < t->tokens_.size(); ++i) {
    if (t->IsSpecial(static_cast<int32_t>(i))) continue;
    auto bytes = TokenTextToBytes(t->tokens_[i]);
    const size_t n = bytes ? bytes->size() : t->tokens_[i].size();
    t->max_token_bytes_ = std::max(t->max_token_bytes_, n);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = t->token_ids_.find(ByteToUnicode(static_cast<uint8_t>(b)));
    if (it == t->token_ids_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key 'tokenizer.ggml.tokens' lacks the byte token for byte ", b));
    }
    t->byte_token_[b] = it->second;
  }
  ASSIGN_OR_RETURN(std::vector<std::string> merges,
                   file.GetStringArray(gguf_keys::kTokenizerGgmlMerges));
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("key 'tokenizer.ggml.merges' entry ", rank, " is not \"left right\""));
    }
    const std::string left = m.substr(0, space), right = m.substr(space + 1);
    auto l = t->token_ids_.find(left), r = t->token_ids_.find(right),
         j = t->token_ids_.find(left + right);
    if (l == t->token_ids_.end() || r == t->token_ids_.end() || j == t->token_ids_.end()) {
      continue;  // a merge whose parts or result are not tokens can never apply
    }
    t->merges_.emplace(PairKey(l->second, r->second),
                       std::make_pair(static_cast<int32_t>(rank), j->second));
  }
  auto id_key = [&](const char* key, int32_t* out) -> absl::Status {
    if (file.FindKey(key) == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(int64_t v, file.GetInt(key, 0, static_cast<int64_t>(t->tokens_.size()) - 1));
    *out = static_cast<int32_t>(v);
    return absl::OkStatus();
  };
  int32_t eos = -1;
  RETURN_IF_ERROR(id_key(gguf_keys::kTokenizerGgmlBosTokenId, &t->bos_id_));
  RETURN_IF_ERROR(id_key(gguf_keys::kTokenizerGgmlEosTokenId, &eos));
  if (eos >= 0) t->eos_ids_.push_back(eos);
  for (const char* extra : {"<|im_end|>", "<|endoftext|>"}) {
    const int32_t id = t->FindToken(extra);
    if (id >= 0 && std::find(t->eos_ids_.begin(), t->eos_ids_.end(), id) == t->eos_ids_.end()) {
      t->eos_ids_.push_back(id);
    }
  }
  if (file.FindKey(gguf_keys::kTokenizerGgmlAddBosToken) != nullptr) {
    ASSIGN_OR_RETURN(t->add_bos_, file.GetBool(gguf_keys::kTokenizerGgmlAddBosToken));
  }
  if (t->add_bos_ && t->bos_id_ < 0) {
    return absl::InvalidArgumentError(
        "key 'tokenizer.ggml.add_bos_token' is true but there is no "
        "'tokenizer.ggml.bos_token_id'");
  }

  t->icu_ = std::make_unique<Icu>();
  UErrorCode status = U_ZERO_ERROR;
  UParseError parse_error;
  t->icu_->split.reset(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(pattern), 0, parse_error, status));
  if (U_FAILURE(status)) return absl::InternalError("cannot compile the pre-tokenizer regex");
  t->icu_->nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) return absl::InternalError("ICU has no NFC normalizer");
  return t;
}

int32_t Tokenizer::FindToken(absl::string_view text) const {
  auto it = token_ids_.find(std::string(text));
  return it == token_ids_.end() ? -1 : it->second;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() &&
         (types_[id] == kTypeControl || types_[id] == kTypeUserDefined);
}

bool Tokenizer::IsControl(int32_t id) const {
  return id >= 0 && id < vocab_size() && types_[id] == kTypeControl;
}

// BPE over one pre-token: repeatedly merge the adjacent pair of lowest rank (leftmost first).
void Tokenizer::EncodePiece(const std::string& piece, std::vector<int32_t>& out) const {
  auto whole = token_ids_.find(BytesToTokenText(piece));
  if (whole != token_ids_.end() && types_[whole->second] != kTypeControl) {
    out.push_back(whole->second);
    return;
  }
  // BPE: repeatedly merge the adjacent pair of lowest rank, the leftmost among equals. A heap
  // of candidate pairs keyed by (rank, position) over a linked list of symbols does it in
  // O(n log n), so one huge pre-token cannot stall a worker; an entry whose symbols changed
  // since it was pushed is skipped (a symbol's id only changes by growing into a longer token,
  // so an id seen again is the same symbol).
  struct Symbol {
    int32_t id, prev, next;
  };
  std::vector<Symbol> syms(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    syms[i] = {byte_token_[static_cast<unsigned char>(piece[i])], static_cast<int32_t>(i) - 1,
               i + 1 < piece.size() ? static_cast<int32_t>(i) + 1 : -1};
  }
  struct Candidate {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int32_t i) {
    const int32_t j = syms[i].next;
    if (j < 0) return;
    auto it = merges_.find(PairKey(syms[i].id, syms[j].id));
    if (it != merges_.end()) {
      heap.push({it->second.first, i, syms[i].id, syms[j].id, it->second.second});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = syms[c.pos];
    if (left.id != c.left || left.next < 0 || syms[left.next].id != c.right) continue;
    Symbol& right = syms[left.next];
    left.id = c.merged;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = c.pos;
    right.id = -1;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

std::vector<std::string> Tokenizer::Split(absl::string_view raw) const {
  return SplitValidUtf8(SanitizeUtf8(raw));
}

std::vector<std::string> Tokenizer::SplitValidUtf8(const std::string& text) const {
  std::vector<std::string> pieces;
  if (text.empty()) return pieces;
  UErrorCode status = U_ZERO_ERROR;
  icu::UnicodeString normalized = icu_->nfc->normalize(icu::UnicodeString::fromUTF8(text), status);
  if (U_FAILURE(status)) normalized = icu::UnicodeString::fromUTF8(text);
  status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> m(icu_->split->matcher(normalized, status));
  if (U_FAILURE(status)) return {text};
  int32_t last = 0;
  while (m->find(status) && U_SUCCESS(status)) {
    const int32_t start = m->start(status), end = m->end(status);
    if (start > last) pieces.push_back(ToUtf8(normalized.tempSubString(last, start - last)));
    if (end > start) pieces.push_back(ToUtf8(normalized.tempSubString(start, end - start)));
    last = end;
  }
  if (last < normalized.length()) pieces.push_back(ToUtf8(normalized.tempSubString(last)));
  return pieces;
}

void Tokenizer::EncodeText(const std::string& text, std::vector<int32_t>& out,
                           size_t max_tokens) const {
  for (const std::string& piece : SplitValidUtf8(text)) {
    if (out.size() > max_tokens) return;
    // No token covers more than max_token_bytes_ of a piece: a piece that needs more tokens
    // than are left is not worth its BPE (a 3 MiB run of letters would take seconds).
    const size_t at_least = (piece.size() + max_token_bytes_ - 1) / max_token_bytes_;
    if (max_tokens != SIZE_MAX && out.size() + at_least > max_tokens) {
      out.resize(max_tokens + 1, -1);
      return;
    }
    EncodePiece(piece, out);
  }
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view raw, bool parse_special,
                                       size_t max_tokens) const {
  std::string text = SanitizeUtf8(raw);
  std::vector<std::pair<size_t, size_t>> markup;
  if (parse_special && !text.empty()) markup.emplace_back(0, text.size());
  return EncodeSanitized(text, markup, max_tokens);
}

std::vector<int32_t> Tokenizer::Encode(const std::vector<PromptPiece>& pieces,
                                       size_t max_tokens) const {
  // The sanitized text, and the byte ranges of its markup pieces.
  std::string text;
  std::vector<std::pair<size_t, size_t>> markup;
  for (const PromptPiece& piece : pieces) {
    const size_t start = text.size();
    text += SanitizeUtf8(piece.text);
    if (!piece.markup || text.size() == start) continue;
    if (!markup.empty() && markup.back().second == start) {
      markup.back().second = text.size();  // neighbouring markup is one
    } else {
      markup.emplace_back(start, text.size());
    }
  }
  return EncodeSanitized(text, markup, max_tokens);
}

std::vector<int32_t> Tokenizer::EncodeSanitized(
    const std::string& text, const std::vector<std::pair<size_t, size_t>>& markup,
    size_t max_tokens) const {
  std::vector<int32_t> out;
  if (add_bos_) out.push_back(bos_id_);
  size_t pos = 0, plain_start = 0;
  for (const auto& [begin, end] : markup) {
    for (pos = std::max(pos, begin); pos < end && out.size() <= max_tokens;) {
      bool matched = false;
      if (!special_first_byte_[static_cast<unsigned char>(text[pos])]) {
        ++pos;
        continue;
      }
      for (const auto& [s, id] : specials_) {
        if (pos + s.size() <= end && text.compare(pos, s.size(), s) == 0) {
          EncodeText(text.substr(plain_start, pos - plain_start), out, max_tokens);
          out.push_back(id);
          pos += s.size();
          plain_start = pos;
          matched = true;
          break;
        }
      }
      if (!matched) ++pos;
    }
  }
  if (out.size() <= max_tokens) EncodeText(text.substr(plain_start), out, max_tokens);
  return out;
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  if (IsSpecial(id)) return tokens_[id];
  auto bytes = TokenTextToBytes(tokens_[id]);
  return bytes ? *bytes : tokens_[id];
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += TokenBytes(id);
  return out;
}

}  // namespace walsh
