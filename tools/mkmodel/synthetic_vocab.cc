#include "tools/mkmodel/synthetic_vocab.h"

#include <cctype>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "worker/model/byte_unicode.h"

namespace walsh {
namespace {

constexpr char kCorpus[] = R"(
The quick brown fox jumps over the lazy dog. A ternary model stores every weight as minus one,
zero or plus one, with one scale for each block of one hundred and twenty-eight weights. The
Hadamard rotation spreads the outliers of an activation over the whole block, so that a low-bit
weight can still carry the information of the original network. The server streams tokens to
the client as soon as they are sampled, and the gateway routes each request to the worker with
the least outstanding work. When a worker goes away in the middle of a stream, the gateway
resumes the request on another worker at the next output index, with the same seed.
In the beginning the engine reads the file, checks the contract, and maps the weights.
def forward(self, tokens):
    hidden = self.embed(tokens)
    for layer in self.layers:
        hidden = hidden + layer(hidden)
    return self.head(self.norm(hidden))
for (int i = 0; i < n; ++i) { sum += weight[i] * input[i]; }
return the number of tokens, the time to first token and the tokens per second.
1234567890 3.14159 2026-11-30 100% 0x7f
)";

// Splits the corpus into words the way byte-level BPE pre-tokenizers roughly do: an optional
// leading space followed by a run of letters, digits, or other non-space characters.
std::vector<std::string> SplitWords(const std::string& text) {
  auto cls = [](unsigned char c) {
    if (std::isalpha(c)) return 0;
    if (std::isdigit(c)) return 1;
    if (std::isspace(c)) return 2;
    return 3;
  };
  std::vector<std::string> words;
  size_t i = 0;
  while (i < text.size()) {
    std::string w;
    if (text[i] == ' ' && i + 1 < text.size() && cls(text[i + 1]) != 2) w.push_back(text[i++]);
    const int c = cls(static_cast<unsigned char>(text[i]));
    while (i < text.size() && cls(static_cast<unsigned char>(text[i])) == c) {
      w.push_back(text[i++]);
      if (c == 1) break;  // digits one at a time, as the Qwen pre-tokenizer does
    }
    words.push_back(w);
  }
  return words;
}

struct Builder {
  std::vector<std::string> tokens;
  absl::flat_hash_set<std::string> known;
  std::vector<std::string> merges;

  bool AddMerge(const std::string& a, const std::string& b) {
    std::string joined = a + b;
    if (known.contains(joined)) return false;
    // `a` and `b` may point into `tokens`: use them before it grows.
    merges.push_back(absl::StrCat(a, " ", b));
    known.insert(joined);
    tokens.push_back(std::move(joined));
    return true;
  }
};

// Greedy BPE training: repeatedly merge the most frequent adjacent pair (ties broken by the
// pair's text, so the result is deterministic) until `budget` merges or no pair repeats.
void TrainMerges(Builder& b, int64_t budget) {
  std::map<std::string, int64_t> word_counts;
  for (const std::string& w : SplitWords(kCorpus)) ++word_counts[BytesToTokenText(w)];
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [w, n] : word_counts) {
    std::vector<std::string> symbols;
    for (size_t i = 0; i < w.size();) {
      const unsigned char lead = static_cast<unsigned char>(w[i]);
      const size_t len = lead < 0x80 ? 1 : lead < 0xe0 ? 2 : 3;
      symbols.push_back(w.substr(i, len));
      i += len;
    }
    words.emplace_back(std::move(symbols), n);
  }
  while (static_cast<int64_t>(b.merges.size()) < budget) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;
    for (const auto& [symbols, n] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i) pairs[{symbols[i], symbols[i + 1]}] += n;
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int64_t best_count = 1;
    for (const auto& [pair, n] : pairs) {
      if (n > best_count) {
        best = &pair;
        best_count = n;
      }
    }
    if (best == nullptr) break;
    const auto [left, right] = *best;
    if (!b.AddMerge(left, right)) break;
    for (auto& [symbols, n] : words) {
      std::vector<std::string> merged;
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          merged.push_back(left + right);
          ++i;
        } else {
          merged.push_back(symbols[i]);
        }
      }
      symbols = std::move(merged);
    }
  }
}

// Fills the remaining merges with systematic pairs of existing tokens, in a fixed order.
void FillMerges(Builder& b, int64_t budget) {
  for (size_t i = 0; static_cast<int64_t>(b.merges.size()) < budget; ++i) {
    for (size_t j = 0; j <= i && static_cast<int64_t>(b.merges.size()) < budget; ++j) {
      b.AddMerge(b.tokens[i], b.tokens[j]);
      if (static_cast<int64_t>(b.merges.size()) < budget && i != j) {
        b.AddMerge(b.tokens[j], b.tokens[i]);
      }
    }
  }
}

// The 34 special tokens that follow the regular ones. The first 26 are Qwen3's, at the offsets
// docs/format.md §9 gives (<|im_end|> +2, pad +11, <think> +24); the last 8 stand for the tokens
// Qwen3.5 added, whose names docs/format.md does not record.
std::vector<std::pair<std::string, int32_t>> SpecialTokens() {
  std::vector<std::pair<std::string, int32_t>> s = {
      {"<|endoftext|>", kTokenControl},       {"<|im_start|>", kTokenControl},
      {"<|im_end|>", kTokenControl},          {"<|object_ref_start|>", kTokenControl},
      {"<|object_ref_end|>", kTokenControl},  {"<|box_start|>", kTokenControl},
      {"<|box_end|>", kTokenControl},         {"<|quad_start|>", kTokenControl},
      {"<|quad_end|>", kTokenControl},        {"<|vision_start|>", kTokenControl},
      {"<|vision_end|>", kTokenControl},      {"<|vision_pad|>", kTokenControl},
      {"<|image_pad|>", kTokenControl},       {"<|video_pad|>", kTokenControl},
      {"<tool_call>", kTokenUserDefined},     {"</tool_call>", kTokenUserDefined},
      {"<|fim_prefix|>", kTokenUserDefined},  {"<|fim_middle|>", kTokenUserDefined},
      {"<|fim_suffix|>", kTokenUserDefined},  {"<|fim_pad|>", kTokenUserDefined},
      {"<|repo_name|>", kTokenUserDefined},   {"<|file_sep|>", kTokenUserDefined},
      {"<tool_response>", kTokenUserDefined}, {"</tool_response>", kTokenUserDefined},
      {"<think>", kTokenUserDefined},         {"</think>", kTokenUserDefined},
  };
  for (int i = 0; i < 8; ++i) {
    s.emplace_back(absl::StrCat("<|reserved_special_", i, "|>"), kTokenControl);
  }
  return s;
}

}  // namespace

SyntheticVocab BuildSyntheticVocab(int64_t regular, int64_t vocab_size) {
  Builder b;
  for (int c = 0; c < 256; ++c) {
    b.tokens.push_back(ByteToUnicode(static_cast<uint8_t>(c)));
    b.known.insert(b.tokens.back());
  }
  const int64_t budget = regular - 256;
  TrainMerges(b, budget);
  FillMerges(b, budget);

  SyntheticVocab v;
  v.tokens = std::move(b.tokens);
  v.merges = std::move(b.merges);
  v.token_types.assign(v.tokens.size(), kTokenNormal);
  v.endoftext_id = static_cast<int64_t>(v.tokens.size());
  v.im_start_id = v.endoftext_id + 1;
  v.im_end_id = v.endoftext_id + 2;
  v.pad_id = v.endoftext_id + 11;
  v.think_id = v.endoftext_id + 24;
  v.end_think_id = v.endoftext_id + 25;
  for (auto& [text, type] : SpecialTokens()) {
    v.tokens.push_back(text);
    v.token_types.push_back(type);
  }
  while (static_cast<int64_t>(v.tokens.size()) < vocab_size) {
    v.tokens.push_back(absl::StrCat("[PAD", v.tokens.size(), "]"));
    v.token_types.push_back(kTokenUnused);
  }
  return v;
}

const char* ChatMlTemplate() {
  return "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
         "message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt "
         "%}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and "
         "enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";
}

}  // namespace walsh
