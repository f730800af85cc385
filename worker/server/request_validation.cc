#include "worker/server/request_validation.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/field_error.h"
#include "common/request_ranges.h"
#include "common/status_macros.h"
#include "worker/engine/chat_format.h"

namespace walsh {
namespace {

template <typename T, typename V>
absl::Status InRange(absl::string_view field, V v, const ValueRange<T>& range) {
  if (!range.Contains(static_cast<T>(v))) {
    return FieldError(field, absl::StrCat(v, " is outside ", range.ToString()));
  }
  return absl::OkStatus();
}

absl::Status CheckIds(absl::string_view field, const google::protobuf::RepeatedField<int32_t>& ids,
                      int64_t vocab) {
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return FieldError(absl::StrCat(field, "[", i, "]"),
                        absl::StrCat(ids[i], " is outside [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

constexpr size_t kMaxConstraintBytes = 64 << 10;
constexpr int kMaxPromptPieces = 65536;

// Tokenizing stops past the context: a prompt that long cannot fit whatever it holds after, so
// a doomed 3 MiB prompt costs as much as one that fits.
size_t PromptTokenLimit(const ValidationLimits& lim) {
  return lim.max_context > 0 ? static_cast<size_t>(lim.max_context) : SIZE_MAX;
}

// Every image the request carries (chat parts, prompt pieces), decoded and preprocessed in
// prompt order. A Resume's too: its prompt ids hold their placeholders.
absl::StatusOr<std::vector<PreparedImage>> PrepareRequestImages(const v1::GenerateRequest& req,
                                                                const ValidationLimits& lim) {
  std::vector<std::pair<std::string, const std::string*>> found;
  if (req.input_case() == v1::GenerateRequest::kChat) {
    for (int i = 0; i < req.chat().messages_size(); ++i) {
      const auto& parts = req.chat().messages(i).parts();
      for (int j = 0; j < parts.size(); ++j) {
        if (parts[j].part_case() != v1::ContentPart::kImage) continue;
        found.push_back(
            {absl::StrCat("chat.messages[", i, "].parts[", j, "].image"), &parts[j].image()});
      }
    }
  } else if (req.input_case() == v1::GenerateRequest::kPieces) {
    const auto& pieces = req.pieces().pieces();
    for (int i = 0; i < pieces.size() && i < kMaxPromptPieces; ++i) {
      if (pieces[i].image().empty()) continue;
      found.push_back({absl::StrCat("pieces.pieces[", i, "].image"), &pieces[i].image()});
    }
  }
  std::vector<PreparedImage> out;
  if (found.empty()) return out;
  if (lim.vision == nullptr) {
    return FieldError(found[0].first,
                      "this worker takes no images (it has no vision projector: --mmproj)");
  }
  if (static_cast<int64_t>(found.size()) > lim.vision->max_images) {
    return FieldError(found[lim.vision->max_images].first,
                      absl::StrCat(found.size(), " images in one request; the most is ",
                                   lim.vision->max_images, " (--max-images-per-request)"));
  }
  // What the images cost, from their headers, before any is decoded: a request whose images
  // cannot fit is refused for the price of reading a few bytes of each.
  int64_t pixels = 0, tokens = 0;
  for (const auto& [field, bytes] : found) {
    ASSIGN_OR_RETURN(const ImageCost cost, ImageCostOf(*lim.vision, field, *bytes));
    pixels += cost.pixels;
    tokens += cost.rows + 2;  // and <|vision_start|>, <|vision_end|>
    if (pixels > lim.vision->max_request_pixels) {
      return FieldError(
          field, absl::StrCat("the request's images hold ", pixels,
                              " pixels up to this one, over the limit of ",
                              lim.vision->max_request_pixels, " (--max-request-image-pixels)"));
    }
    if (lim.max_context > 0 && tokens > lim.max_context) {
      return FieldError(field, absl::StrCat("the request's images take ", tokens,
                                            " tokens up to this one, over the context limit of ",
                                            lim.max_context, " tokens"));
    }
  }
  for (auto& [field, bytes] : found) {
    auto image = PrepareImage(*lim.vision, std::move(field), *bytes);
    if (!image.ok()) return image.status();
    out.push_back(*std::move(image));
  }
  return out;
}

absl::Status ValidateConstraint(const v1::GenerateRequest& req, const ValidationLimits& lim,
                                GenerationRequest& g) {
  ConstraintSpec spec;
  const char* field = "";
  switch (req.constraint_case()) {
    case v1::GenerateRequest::kJsonSchema:
      spec = {ConstraintSpec::Kind::kJsonSchema, req.json_schema()};
      field = "json_schema";
      break;
    case v1::GenerateRequest::kJsonObject:
      if (!req.json_object()) return FieldError("json_object", "must be true when set");
      spec = {ConstraintSpec::Kind::kJsonObject, ""};
      field = "json_object";
      break;
    case v1::GenerateRequest::kRegex:
      spec = {ConstraintSpec::Kind::kRegex, req.regex()};
      field = "regex";
      break;
    case v1::GenerateRequest::kGrammar:
      spec = {ConstraintSpec::Kind::kGrammar, req.grammar()};
      field = "grammar";
      break;
    case v1::GenerateRequest::CONSTRAINT_NOT_SET:
      return absl::OkStatus();
  }
  if (spec.text.size() > kMaxConstraintBytes) {
    return FieldError(field,
                      absl::StrCat(spec.text.size(), " bytes; at most ", kMaxConstraintBytes));
  }
  if (lim.constraints == nullptr)
    return FieldError(field, "this model has no tokenizer to constrain");
  if (lim.tokenizer->eos_ids().empty()) {
    return FieldError(field, "this model has no EOS token to end a constrained output");
  }
  if (g.stop.ignore_eos) {
    return FieldError("stopping.ignore_eos",
                      "cannot be set with a constraint, which decides the end");
  }
  auto compiled = lim.constraints->Get(spec);
  // The compilers' messages start with the field's name.
  if (!compiled.ok()) return absl::InvalidArgumentError(compiled.status().message());
  g.constraint = *std::move(compiled);
  g.mask_limits = lim.mask_limits;
  return absl::OkStatus();
}

}  // namespace

bool CarriesImages(const v1::GenerateRequest& req) {
  if (req.input_case() == v1::GenerateRequest::kChat) {
    for (const auto& m : req.chat().messages()) {
      for (const auto& part : m.parts()) {
        if (part.part_case() == v1::ContentPart::kImage) return true;
      }
    }
  } else if (req.input_case() == v1::GenerateRequest::kPieces) {
    for (const auto& piece : req.pieces().pieces()) {
      if (!piece.image().empty()) return true;
    }
  }
  return false;
}

absl::StatusOr<ValidRequest> ValidateGenerateRequest(const v1::GenerateRequest& req,
                                                     const ValidationLimits& lim,
                                                     const std::vector<int32_t>* prompt_override,
                                                     int64_t already_emitted) {
  ValidRequest out;
  GenerationRequest& g = out.generation;
  if (req.request_id().size() > 128) return FieldError("request_id", "longer than 128 bytes");

  auto images = PrepareRequestImages(req, lim);
  if (!images.ok()) return images.status();
  out.images = *std::move(images);
  size_t next_image = 0;  // the placeholders render in the order the images were prepared
  if (prompt_override != nullptr) {
    g.prompt = *prompt_override;
  } else {
    switch (req.input_case()) {
      case v1::GenerateRequest::kText:
        if (req.text().empty()) return FieldError("text", "must not be empty");
        if (lim.tokenizer == nullptr)
          return FieldError("text", "this model has no tokenizer; send tokens");
        g.prompt = lim.tokenizer->Encode(req.text(), true, PromptTokenLimit(lim));
        break;
      case v1::GenerateRequest::kTokens:
        if (req.tokens().ids().empty()) return FieldError("tokens.ids", "must not be empty");
        if (auto s = CheckIds("tokens.ids", req.tokens().ids(), lim.vocab); !s.ok()) return s;
        g.prompt.assign(req.tokens().ids().begin(), req.tokens().ids().end());
        break;
      case v1::GenerateRequest::kChat: {
        if (lim.tokenizer == nullptr)
          return FieldError("chat", "this model has no tokenizer; send tokens");
        if (req.chat().messages().empty()) return FieldError("chat.messages", "must not be empty");
        std::vector<ChatMessage> messages;
        for (int i = 0; i < req.chat().messages_size(); ++i) {
          const v1::ChatMessage& m = req.chat().messages(i);
          messages.push_back({m.role(), m.content()});
          if (m.parts().empty()) continue;
          if (!m.content().empty()) {
            return FieldError(absl::StrCat("chat.messages[", i, "].content"),
                              "cannot go with parts");
          }
          for (int j = 0; j < m.parts_size(); ++j) {
            const v1::ContentPart& part = m.parts(j);
            if (part.part_case() == v1::ContentPart::PART_NOT_SET) {
              return FieldError(absl::StrCat("chat.messages[", i, "].parts[", j, "]"),
                                "one of text or image is required");
            }
            if (part.part_case() == v1::ContentPart::kText) {
              messages.back().parts.push_back({part.text(), false});
            } else {
              messages.back().parts.push_back({ImagePlaceholder(out.images[next_image++]), true});
            }
          }
        }
        auto pieces = FormatChatMlPieces(messages, req.chat().enable_thinking());
        if (!pieces.ok()) {
          // The formatter names "messages[i].role"; the request's field is under "chat.".
          const std::string field = FieldOf(pieces.status());
          if (field.empty()) return FieldError("chat", pieces.status().message());
          absl::string_view why = pieces.status().message();
          absl::ConsumePrefix(&why, field + ": ");
          return FieldError("chat." + field, why);
        }
        g.prompt = lim.tokenizer->Encode(*pieces, PromptTokenLimit(lim));
        break;
      }
      case v1::GenerateRequest::kPieces: {
        if (lim.tokenizer == nullptr)
          return FieldError("pieces", "this model has no tokenizer; send tokens");
        const auto& given = req.pieces().pieces();
        if (given.empty()) return FieldError("pieces.pieces", "must not be empty");
        if (given.size() > kMaxPromptPieces) {
          return FieldError("pieces.pieces",
                            absl::StrCat(given.size(), " pieces; the most is ", kMaxPromptPieces));
        }
        std::vector<PromptPiece> pieces;
        bool any_text = false;
        for (int i = 0; i < given.size(); ++i) {
          const v1::PromptPiece& p = given[i];
          if (!p.image().empty()) {
            if (!p.text().empty() || p.markup()) {
              return FieldError(absl::StrCat("pieces.pieces[", i, "]"),
                                "an image piece has no text and is not markup");
            }
            pieces.push_back({ImagePlaceholder(out.images[next_image++]), true});
            any_text = true;
            continue;
          }
          pieces.push_back({p.text(), p.markup()});
          any_text |= !p.text().empty();
        }
        if (!any_text) return FieldError("pieces.pieces", "hold no text");
        g.prompt = lim.tokenizer->Encode(pieces, PromptTokenLimit(lim));
        break;
      }
      case v1::GenerateRequest::INPUT_NOT_SET:
        return FieldError("input", "one of text, tokens, chat or pieces is required");
    }
  }
  // Tokenizing stopped past the context: refused before anything else costs (a constraint).
  if (lim.max_context > 0 && static_cast<int64_t>(g.prompt.size()) > lim.max_context) {
    return FieldError("prompt", absl::StrCat("a prompt of more than ", lim.max_context,
                                             " tokens exceeds the context limit of ",
                                             lim.max_context, " tokens"));
  }
  if (lim.vision != nullptr) {
    auto spans = LocateImages(g.prompt, *lim.vision, out.images,
                              prompt_override != nullptr ? "prompt_ids" : "prompt");
    if (!spans.ok()) return spans.status();
    out.image_spans = *std::move(spans);
  }

  const v1::SamplingParams& s = req.sampling();
  SamplingParams& sp = g.sampling;
  if (s.has_temperature()) {
    if (auto st = InRange("sampling.temperature", s.temperature(), request_ranges::kTemperature);
        !st.ok())
      return st;
    sp.temperature = s.temperature();
  }
  if (s.has_top_k()) {
    if (auto st = InRange("sampling.top_k", s.top_k(), ValueRange<int64_t>{0, lim.vocab}); !st.ok())
      return st;
    sp.top_k = s.top_k();
  }
  if (s.has_top_p()) {
    if (auto st = InRange("sampling.top_p", s.top_p(), request_ranges::kTopP); !st.ok()) return st;
    sp.top_p = s.top_p();
  }
  if (s.has_min_p()) {
    if (auto st = InRange("sampling.min_p", s.min_p(), request_ranges::kMinP); !st.ok()) return st;
    sp.min_p = s.min_p();
  }
  if (s.has_repetition_penalty()) {
    if (auto st = InRange("sampling.repetition_penalty", s.repetition_penalty(),
                          request_ranges::kRepetitionPenalty);
        !st.ok())
      return st;
    sp.repetition_penalty = s.repetition_penalty();
  }
  if (s.has_presence_penalty()) {
    if (auto st = InRange("sampling.presence_penalty", s.presence_penalty(),
                          request_ranges::kPresencePenalty);
        !st.ok())
      return st;
    sp.presence_penalty = s.presence_penalty();
  }
  if (s.has_frequency_penalty()) {
    if (auto st = InRange("sampling.frequency_penalty", s.frequency_penalty(),
                          request_ranges::kFrequencyPenalty);
        !st.ok())
      return st;
    sp.frequency_penalty = s.frequency_penalty();
  }
  for (const auto& [id, bias] : s.logit_bias()) {
    if (id < 0 || id >= lim.vocab) {
      return FieldError("sampling.logit_bias",
                        absl::StrCat("token id ", id, " is outside [0, ", lim.vocab, ")"));
    }
    if (auto st = InRange(absl::StrCat("sampling.logit_bias[", id, "]"), bias,
                          request_ranges::kLogitBias);
        !st.ok())
      return st;
    sp.logit_bias.emplace_back(id, bias);
  }
  std::sort(sp.logit_bias.begin(), sp.logit_bias.end());
  if (s.has_seed()) {
    out.seed = s.seed();
  } else {
    std::random_device rd;
    out.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  sp.seed = out.seed;
  RETURN_IF_ERROR(InRange("logprobs", req.logprobs(), request_ranges::kLogprobs));
  sp.logprobs = static_cast<int32_t>(req.logprobs());
  if (req.has_num_speculative_tokens()) {
    if (auto e = InRange("num_speculative_tokens", req.num_speculative_tokens(),
                         request_ranges::kNumSpeculativeTokens);
        !e.ok())
      return e;
    out.speculative_tokens = req.num_speculative_tokens();
  }

  const v1::StoppingCriteria& st = req.stopping();
  StopConfig& sc = g.stop;
  sc.max_tokens = std::min<int64_t>(256, lim.max_output_tokens);
  if (st.has_max_tokens()) {
    if (auto e = InRange("stopping.max_tokens", st.max_tokens(),
                         ValueRange<int64_t>{1, lim.max_output_tokens});
        !e.ok())
      return e;
    sc.max_tokens = st.max_tokens();
  }
  if (st.stop_size() > 16)
    return FieldError("stopping.stop", absl::StrCat(st.stop_size(), " strings; at most 16"));
  for (int i = 0; i < st.stop_size(); ++i) {
    if (st.stop(i).empty() || st.stop(i).size() > 256) {
      return FieldError(absl::StrCat("stopping.stop[", i, "]"), "must be 1 to 256 bytes");
    }
    if (lim.tokenizer == nullptr) return FieldError("stopping.stop", "this model has no tokenizer");
    sc.stop_strings.push_back(st.stop(i));
  }
  if (st.stop_token_ids_size() > 64) return FieldError("stopping.stop_token_ids", "at most 64");
  if (auto e = CheckIds("stopping.stop_token_ids", st.stop_token_ids(), lim.vocab); !e.ok())
    return e;
  sc.stop_ids.assign(st.stop_token_ids().begin(), st.stop_token_ids().end());
  sc.ignore_eos = st.ignore_eos();
  if (lim.tokenizer != nullptr) sc.eos_ids = lim.tokenizer->eos_ids();

  if (req.constraint_case() != v1::GenerateRequest::CONSTRAINT_NOT_SET) {
    if (auto e = ValidateConstraint(req, lim, g); !e.ok()) return e;
  }

  const int64_t prompt = static_cast<int64_t>(g.prompt.size());
  if (prompt + sc.max_tokens > lim.max_context) {
    return FieldError(
        prompt + 1 > lim.max_context ? "prompt" : "stopping.max_tokens",
        absl::StrCat("a prompt of ", prompt, " tokens plus max_tokens ", sc.max_tokens,
                     " exceeds the context limit of ", lim.max_context, " tokens"));
  }
  if (already_emitted >= sc.max_tokens) {
    return FieldError("emitted_ids",
                      absl::StrCat(already_emitted, " tokens were already emitted; max_tokens is ",
                                   sc.max_tokens));
  }
  return out;
}

}  // namespace walsh
