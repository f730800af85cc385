#include "openai/openai_request.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/field_error.h"
#include "common/json_shape.h"
#include "common/request_ranges.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "openai/api_error.h"
#include "openai/media_url.h"
#include "openai/structured_output.h"

namespace walsh {
namespace {

using Json = nlohmann::ordered_json;  // keeps the client's key order for the prompt

// An image part's field, and whether its URL is fetched (http(s)) rather than inline (data:).
struct ImageField {
  std::string field;            // messages[i].content[j]
  std::optional<MediaUrl> url;  // set: fetched (http(s)), not inline (data:)
};

absl::Status Refuse(const std::string& field, const std::string& why) {
  return FieldError(field, why);
}

const char* TypeName(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// Present and not null.
const Json* Get(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// Inside `range` (common/request_ranges.h): the message writes the range as the worker does.
absl::StatusOr<std::optional<double>> Number(const Json& obj, const char* key,
                                             const ValueRange<double>& range) {
  const Json* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return Refuse(key, absl::StrCat("expected a number, got ", TypeName(*v)));
  const double d = v->get<double>();
  if (!range.Contains(d)) return Refuse(key, absl::StrCat(d, " is outside ", range.ToString()));
  return d;
}

absl::StatusOr<std::optional<int64_t>> Integer(const Json& obj, const char* key, int64_t lo,
                                               int64_t hi) {
  const Json* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) {
    return Refuse(key, absl::StrCat("expected an integer, got ", TypeName(*v)));
  }
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return Refuse(key, absl::StrCat(v->get<uint64_t>(), " is outside [", lo, ", ", hi, "]"));
  }
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) return Refuse(key, absl::StrCat(i, " is outside [", lo, ", ", hi, "]"));
  return i;
}

absl::StatusOr<std::optional<bool>> Bool(const Json& obj, const char* key) {
  const Json* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return Refuse(key, absl::StrCat("expected a boolean, got ", TypeName(*v)));
  return v->get<bool>();
}

absl::StatusOr<std::optional<std::string>> String(const Json& obj, const char* key) {
  const Json* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return Refuse(key, absl::StrCat("expected a string, got ", TypeName(*v)));
  return v->get<std::string>();
}

// A refusal of the whole body: no field to name.
absl::StatusOr<Json> ParseObject(const std::string& body) {
  switch (CheckJsonShape(body)) {
    case JsonShape::kOk:
      break;
    case JsonShape::kInvalid:
      return absl::InvalidArgumentError("the body is not valid JSON");
    case JsonShape::kTooDeep:
      return absl::InvalidArgumentError(
          absl::StrCat("the body nests deeper than ", kMaxJsonDepth, " levels"));
    case JsonShape::kTooManyValues:
      return absl::InvalidArgumentError(
          absl::StrCat("the body holds more than ", kMaxJsonValues, " values"));
  }
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the body is not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  return j;
}

// Fields both endpoints share: sampling, stopping, streaming.
absl::Status ParseCommon(const Json& j, OpenAiRequest& r) {
  ASSIGN_OR_RETURN(const std::optional<std::string> model, String(j, "model"));
  if (model) r.model = *model;
  ASSIGN_OR_RETURN(const std::optional<bool> stream, Bool(j, "stream"));
  r.stream = stream.value_or(false);
  if (const Json* so = Get(j, "stream_options")) {
    if (!so->is_object()) return Refuse("stream_options", "expected an object");
    if (!r.stream) return Refuse("stream_options", "only allowed when stream is true");
    auto u = so->find("include_usage");
    if (u != so->end() && !u->is_null()) {
      if (!u->is_boolean()) return Refuse("stream_options.include_usage", "expected a boolean");
      r.include_usage = u->get<bool>();
    }
  }
  ASSIGN_OR_RETURN(const std::optional<int64_t> n, Integer(j, "n", 1, 128));
  if (n && *n != 1) {
    return Refuse("n", absl::StrCat(*n, " choices: walsh returns one choice per request (n = 1); ",
                                    "send ", *n, " requests"));
  }
  if (const Json* rf = Get(j, "response_format")) {
    RETURN_IF_ERROR(ApplyResponseFormat(*rf, r.generate));
  }
  v1::SamplingParams& s = *r.generate.mutable_sampling();
  v1::StoppingCriteria& st = *r.generate.mutable_stopping();
  ASSIGN_OR_RETURN(const std::optional<double> temperature,
                   Number(j, "temperature", request_ranges::kOpenAiTemperature));
  if (temperature) s.set_temperature(static_cast<float>(*temperature));
  ASSIGN_OR_RETURN(const std::optional<double> top_p, Number(j, "top_p", request_ranges::kTopP));
  if (top_p) s.set_top_p(static_cast<float>(*top_p));
  ASSIGN_OR_RETURN(const std::optional<double> presence,
                   Number(j, "presence_penalty", request_ranges::kPresencePenalty));
  if (presence) s.set_presence_penalty(static_cast<float>(*presence));
  ASSIGN_OR_RETURN(const std::optional<double> frequency,
                   Number(j, "frequency_penalty", request_ranges::kFrequencyPenalty));
  if (frequency) s.set_frequency_penalty(static_cast<float>(*frequency));
  // -1 and 0 are off (vLLM's and OpenAI clients' spellings); past the vocabulary is off too.
  ASSIGN_OR_RETURN(const std::optional<int64_t> top_k, Integer(j, "top_k", -1, INT32_MAX));
  if (top_k && *top_k > 0) s.set_top_k(static_cast<int32_t>(*top_k));
  ASSIGN_OR_RETURN(const std::optional<double> min_p, Number(j, "min_p", request_ranges::kMinP));
  if (min_p) s.set_min_p(static_cast<float>(*min_p));
  ASSIGN_OR_RETURN(const std::optional<double> repetition,
                   Number(j, "repetition_penalty", request_ranges::kRepetitionPenalty));
  if (repetition) s.set_repetition_penalty(static_cast<float>(*repetition));
  ASSIGN_OR_RETURN(const std::optional<int64_t> speculative,
                   Integer(j, "num_speculative_tokens", request_ranges::kNumSpeculativeTokens.lo,
                           request_ranges::kNumSpeculativeTokens.hi));
  if (speculative) r.generate.set_num_speculative_tokens(static_cast<uint32_t>(*speculative));
  if (const Json* seed = Get(j, "seed")) {
    if (!seed->is_number_integer()) return Refuse("seed", "expected an integer");
    s.set_seed(seed->is_number_unsigned() ? seed->get<uint64_t>()
                                          : static_cast<uint64_t>(seed->get<int64_t>()));
  }
  if (const Json* lb = Get(j, "logit_bias")) {
    if (!lb->is_object()) return Refuse("logit_bias", "expected an object of token id -> bias");
    for (const auto& [key, bias] : lb->items()) {
      // Digits only: SimpleAtoi alone would also take " 5" or "+5".
      int32_t id = 0;
      const bool digits = !key.empty() && std::all_of(key.begin(), key.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
      if (!digits || !absl::SimpleAtoi(key, &id)) {
        return Refuse("logit_bias", absl::StrCat("key ", Quoted(key), " is not a token id"));
      }
      if (!bias.is_number() || !request_ranges::kLogitBias.Contains(bias.get<double>())) {
        return Refuse(absl::StrCat("logit_bias.", key),
                      absl::StrCat("expected a number in ", request_ranges::kLogitBias.ToString()));
      }
      (*s.mutable_logit_bias())[id] = bias.get<float>();
    }
  }
  const char* max_name = "max_tokens";
  ASSIGN_OR_RETURN(std::optional<int64_t> max, Integer(j, "max_tokens", 1, UINT32_MAX));
  ASSIGN_OR_RETURN(const std::optional<int64_t> max_completion,
                   Integer(j, "max_completion_tokens", 1, UINT32_MAX));
  if (max_completion) {
    max = max_completion;
    max_name = "max_completion_tokens";
  }
  if (max) st.set_max_tokens(static_cast<uint32_t>(*max));
  if (const Json* stop = Get(j, "stop")) {
    if (stop->is_string()) {
      st.add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) {
          return Refuse(absl::StrCat("stop[", i, "]"), "expected a string");
        }
        st.add_stop((*stop)[i].get<std::string>());
      }
    } else {
      return Refuse("stop", "expected a string or an array of strings");
    }
  }
  ASSIGN_OR_RETURN(const std::optional<bool> ignore_eos, Bool(j, "ignore_eos"));
  if (ignore_eos) st.set_ignore_eos(*ignore_eos);
  ASSIGN_OR_RETURN(const std::optional<std::string> user, String(j, "user"));
  if (user && user->size() > 256) return Refuse("user", "over 256 bytes");

  r.field_names = {{"sampling.", ""},
                   {"stopping.max_tokens", max_name},
                   {"stopping.stop_token_ids", "stop_token_ids"},
                   {"stopping.stop", "stop"},
                   {"stopping.ignore_eos", "ignore_eos"},
                   {"json_schema", "response_format.json_schema.schema"},
                   {"json_object", "response_format"},
                   {"grammar", "tools"},
                   {"request_id", "x-request-id"}};
  return absl::OkStatus();
}

// An image_url part's image: the bytes of a data: URL (base64), or an http(s) URL for the server
// to fetch (`remote`, the URL checked here; its normal form stands in for the bytes).
absl::StatusOr<std::string> ImageUrlBytes(const Json& part, const std::string& field,
                                          std::optional<MediaUrl>& remote) {
  const Json* image_url = Get(part, "image_url");
  const Json* url =
      image_url != nullptr && image_url->is_object() ? Get(*image_url, "url") : nullptr;
  if (url == nullptr || !url->is_string())
    return Refuse(field + ".image_url.url", "expected a string");
  const std::string& u = url->get_ref<const std::string&>();
  if (IsHttpUrl(u)) {
    absl::StatusOr<MediaUrl> parsed = ParseMediaUrl(u);
    if (!parsed.ok())
      return Refuse(field + ".image_url.url", std::string(parsed.status().message()));
    remote = *std::move(parsed);
    return remote->Spec();
  }
  const size_t comma = u.find(',');
  if (u.rfind("data:", 0) != 0 || comma == std::string::npos ||
      u.substr(0, comma).find(";base64") == std::string::npos) {
    return Refuse(field + ".image_url.url",
                  "expected a data: URL with base64 image bytes, or an http(s) URL");
  }
  std::string bytes;
  if (!absl::Base64Unescape(absl::string_view(u.data() + comma + 1, u.size() - comma - 1),
                            &bytes) ||
      bytes.empty()) {
    return Refuse(field + ".image_url.url", "the data: URL's base64 does not decode");
  }
  return bytes;
}

// Content: a string, or an array of {"type": "text", "text": ...} parts, to which a user message
// may add {"type": "image_url", "image_url": {"url": "data:..."}} parts (then `parts` holds them
// all, in order).
absl::Status MessageContent(const Json& m, size_t i, bool user, ChatTurn& turn,
                            std::vector<ImageField>& image_fields) {
  const std::string field = absl::StrCat("messages[", i, "].content");
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return absl::OkStatus();
  if (it->is_string()) {
    turn.content = it->get<std::string>();
    return absl::OkStatus();
  }
  if (!it->is_array()) return Refuse(field, "expected a string or an array of text parts");
  std::vector<PromptPart> parts;
  bool images = false;
  for (size_t p = 0; p < it->size(); ++p) {
    const Json& part = (*it)[p];
    const std::string pf = absl::StrCat(field, "[", p, "]");
    if (!part.is_object()) return Refuse(pf, "expected an object");
    auto type = part.find("type");
    if (type != part.end() && *type == "image_url") {
      if (!user) return Refuse(pf + ".type", "only a user message may carry images");
      std::optional<MediaUrl> remote;
      ASSIGN_OR_RETURN(std::string bytes, ImageUrlBytes(part, pf, remote));
      parts.push_back({"", false, std::move(bytes)});
      image_fields.push_back({pf, std::move(remote)});
      images = true;
      continue;
    }
    if (type == part.end() || *type != "text") {
      return Refuse(pf + ".type", "only \"text\" and \"image_url\" parts are supported");
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) return Refuse(pf + ".text", "expected a string");
    parts.push_back({text->get<std::string>(), false});
  }
  if (!images) {
    for (PromptPart& part : parts) turn.content += part.text;
  } else {
    turn.content_parts = std::move(parts);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RenderedToolCall>> MessageToolCalls(const Json& m, size_t i) {
  std::vector<RenderedToolCall> calls;
  const Json* tc = Get(m, "tool_calls");
  if (tc == nullptr) return calls;
  const std::string field = absl::StrCat("messages[", i, "].tool_calls");
  if (!tc->is_array()) return Refuse(field, "expected an array");
  for (size_t c = 0; c < tc->size(); ++c) {
    const std::string cf = absl::StrCat(field, "[", c, "]");
    const Json& call = (*tc)[c];
    const Json* fn = call.is_object() ? Get(call, "function") : nullptr;
    if (fn == nullptr || !fn->is_object()) return Refuse(cf + ".function", "expected an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) {
      return Refuse(cf + ".function.name", "expected a string");
    }
    RenderedToolCall out{name->get<std::string>(), "{}"};
    auto args = fn->find("arguments");
    if (args != fn->end() && !args->is_null()) {
      // A string goes into the prompt as written, as the template does; an object as tojson.
      if (args->is_string()) {
        out.arguments_json = args->get<std::string>();
      } else if (args->is_object()) {
        out.arguments_json = TemplateJson(*args);
      } else {
        return Refuse(cf + ".function.arguments", "expected a JSON string");
      }
    }
    calls.push_back(std::move(out));
  }
  return calls;
}

// image_fields: each image part's field, in the order the prompt holds them.
absl::Status ParseMessages(const Json& j, ChatPrompt& prompt,
                           std::vector<ImageField>& image_fields) {
  const Json* ms = Get(j, "messages");
  if (ms == nullptr) return Refuse("messages", "is required");
  if (!ms->is_array() || ms->empty()) return Refuse("messages", "expected a non-empty array");
  for (size_t i = 0; i < ms->size(); ++i) {
    const Json& m = (*ms)[i];
    if (!m.is_object()) return Refuse(absl::StrCat("messages[", i, "]"), "expected an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return Refuse(absl::StrCat("messages[", i, "].role"), "expected a string");
    }
    ChatTurn t{role->get<std::string>(), "", {}, {}};
    RETURN_IF_ERROR(MessageContent(m, i, t.role == "user", t, image_fields));
    if (t.role == "developer") t.role = "system";
    if (t.role != "system" && t.role != "user" && t.role != "assistant" && t.role != "tool") {
      return Refuse(
          absl::StrCat("messages[", i, "].role"),
          absl::StrCat(Quoted(t.role), " is not system, developer, user, assistant or tool"));
    }
    if (t.role == "assistant") {
      ASSIGN_OR_RETURN(t.tool_calls, MessageToolCalls(m, i));
    }
    // Only an assistant turn that calls tools may go without content (as OpenAI's API).
    if (Get(m, "content") == nullptr && t.tool_calls.empty()) {
      return Refuse(absl::StrCat("messages[", i, "].content"),
                    absl::StrCat("is required for a ", t.role, " message",
                                 t.role == "assistant" ? " without tool_calls" : ""));
    }
    prompt.turns.push_back(std::move(t));
  }
  return absl::OkStatus();
}

// One entry of `tools`, checked, as a ToolSpec; `names` holds the earlier tools' names.
absl::StatusOr<ToolSpec> ParseTool(const Json& t, size_t i, const std::vector<std::string>& names) {
  const std::string f = absl::StrCat("tools[", i, "]");
  if (!t.is_object()) return Refuse(f, "expected an object");
  auto type = t.find("type");
  if (type == t.end() || *type != "function") return Refuse(f + ".type", "only \"function\"");
  const Json* fn = Get(t, "function");
  if (fn == nullptr || !fn->is_object()) return Refuse(f + ".function", "expected an object");
  auto name = fn->find("name");
  if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
    return Refuse(f + ".function.name", "expected a non-empty string");
  }
  if (auto same = std::find(names.begin(), names.end(), name->get<std::string>());
      same != names.end()) {
    return Refuse(f + ".function.name",
                  absl::StrCat(Quoted(*same), " is also the name of tools[", same - names.begin(),
                               "]; tool names must differ"));
  }
  ToolSpec spec{name->get<std::string>(), nullptr, false};
  if (const Json* params = Get(*fn, "parameters")) spec.parameters = *params;
  if (const Json* strict = Get(*fn, "strict")) {
    if (!strict->is_boolean()) return Refuse(f + ".function.strict", "expected a boolean");
    spec.strict = strict->get<bool>();
  }
  return spec;
}

// tool_choice: "auto", "none", "required" or "named" (then r.forced_tool is set).
absl::StatusOr<std::string> ParseToolChoice(const Json& j, const std::vector<std::string>& names,
                                            OpenAiRequest& r) {
  std::string choice = names.empty() ? "none" : "auto";
  const Json* tc = Get(j, "tool_choice");
  if (tc == nullptr) return choice;
  if (tc->is_string()) {
    choice = tc->get<std::string>();
    if (choice != "auto" && choice != "none" && choice != "required") {
      return Refuse("tool_choice",
                    "expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}");
    }
  } else if (tc->is_object()) {
    const Json* fn = Get(*tc, "function");
    const Json* name = fn != nullptr && fn->is_object() ? Get(*fn, "name") : nullptr;
    if (name == nullptr || !name->is_string()) {
      return Refuse("tool_choice.function.name", "expected a string");
    }
    r.forced_tool = name->get<std::string>();
    if (std::find(names.begin(), names.end(), r.forced_tool) == names.end()) {
      return Refuse("tool_choice.function.name",
                    absl::StrCat(Quoted(r.forced_tool), " is not one of the tools"));
    }
    choice = "named";
  } else {
    return Refuse("tool_choice", "expected a string or an object");
  }
  if (choice != "none" && names.empty()) return Refuse("tool_choice", "given without tools");
  return choice;
}

absl::Status ParseTools(const Json& j, ChatPrompt& prompt, OpenAiRequest& r) {
  if (Get(j, "functions") != nullptr || Get(j, "function_call") != nullptr) {
    return Refuse(Get(j, "functions") != nullptr ? "functions" : "function_call",
                  "the deprecated functions API is not supported; use tools and tool_choice");
  }
  std::vector<std::string> names;
  std::vector<ToolSpec> specs;
  if (const Json* tools = Get(j, "tools")) {
    if (!tools->is_array()) return Refuse("tools", "expected an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      ASSIGN_OR_RETURN(ToolSpec spec, ParseTool((*tools)[i], i, names));
      names.push_back(spec.name);
      specs.push_back(std::move(spec));
      prompt.tools_json.push_back(TemplateJson((*tools)[i]));
    }
  }
  ASSIGN_OR_RETURN(const std::string choice, ParseToolChoice(j, names, r));
  if (choice == "none") {
    prompt.tools_json.clear();  // the model is not told of tools it may not call
  } else {
    r.parse_tool_calls = true;
  }
  prompt.forced_tool = r.forced_tool;
  ASSIGN_OR_RETURN(const std::optional<bool> parallel, Bool(j, "parallel_tool_calls"));
  if (parallel) r.parallel_tool_calls = *parallel;
  const ToolChoice kind = choice == "none"       ? ToolChoice::kNone
                          : choice == "auto"     ? ToolChoice::kAuto
                          : choice == "required" ? ToolChoice::kRequired
                                                 : ToolChoice::kNamed;
  RETURN_IF_ERROR(
      ConstrainToolCalls(specs, kind, r.forced_tool, r.parallel_tool_calls, r.generate));
  r.tool_call_required = kind == ToolChoice::kRequired;
  return absl::OkStatus();
}

absl::Status ParseChatTemplateKwargs(const Json& j, ChatPrompt& prompt) {
  const Json* kw = Get(j, "chat_template_kwargs");
  if (kw == nullptr) return absl::OkStatus();
  if (!kw->is_object()) return Refuse("chat_template_kwargs", "expected an object");
  for (const auto& [key, value] : kw->items()) {
    if (key != "enable_thinking") {
      return Refuse(absl::StrCat("chat_template_kwargs.", key), "unknown (only enable_thinking)");
    }
    if (!value.is_boolean())
      return Refuse("chat_template_kwargs.enable_thinking", "expected a boolean");
    prompt.enable_thinking = value.get<bool>();
  }
  return absl::OkStatus();
}

absl::StatusOr<OpenAiRequest> ParseChat(const std::string& body) {
  ASSIGN_OR_RETURN(const Json j, ParseObject(body));
  OpenAiRequest r;
  r.chat = true;
  RETURN_IF_ERROR(ParseCommon(j, r));
  ChatPrompt prompt;
  std::vector<ImageField> image_fields;
  RETURN_IF_ERROR(ParseMessages(j, prompt, image_fields));
  RETURN_IF_ERROR(ParseTools(j, prompt, r));
  RETURN_IF_ERROR(ParseChatTemplateKwargs(j, prompt));
  // A constraint from the first token (a response_format, a forced call) leaves no room for
  // reasoning: thinking is off for the request. Strict tools under "auto" allow any text
  // before the calls, reasoning included.
  const bool constrained_from_start =
      r.tool_call_required || r.generate.has_json_schema() || r.generate.json_object();
  if (constrained_from_start) prompt.enable_thinking = false;
  r.thinking = prompt.enable_thinking && r.forced_tool.empty();
  ASSIGN_OR_RETURN(const std::optional<bool> logprobs, Bool(j, "logprobs"));
  r.logprobs = logprobs.value_or(false);
  ASSIGN_OR_RETURN(
      const std::optional<int64_t> top,
      Integer(j, "top_logprobs", request_ranges::kLogprobs.lo, request_ranges::kLogprobs.hi));
  if (top) {
    if (!r.logprobs) return Refuse("top_logprobs", "needs logprobs: true");
    r.generate.set_logprobs(static_cast<uint32_t>(*top));
  }
  size_t images = 0;
  for (PromptPart& part : RenderQwenChatParts(prompt)) {
    v1::PromptPiece* piece = r.generate.mutable_pieces()->add_pieces();
    if (!part.image.empty()) {
      const int index = r.generate.pieces().pieces_size() - 1;
      const ImageField& field = image_fields[images++];
      if (field.url) {
        piece->set_image("");
        r.remote_images.push_back({index, *field.url, field.field + ".image_url.url"});
      } else {
        piece->set_image(std::move(part.image));
      }
      // The worker names an image by its piece; the client knows it by its content part.
      r.field_names.insert(r.field_names.begin(),
                           {absl::StrCat("pieces.pieces[", index, "].image"), field.field});
      continue;
    }
    piece->set_text(std::move(part.text));
    piece->set_markup(part.markup);
  }
  r.field_names.emplace_back("logprobs", "top_logprobs");
  r.field_names.emplace_back("pieces", "messages");
  r.field_names.emplace_back("text", "messages");
  r.field_names.emplace_back("prompt", "messages");
  return r;
}

absl::Status ParseCompletionPrompt(const Json& j, OpenAiRequest& r) {
  const Json* p = Get(j, "prompt");
  if (p == nullptr) return Refuse("prompt", "is required");
  const Json* one = p;
  if (p->is_array() && !p->empty() && !(*p)[0].is_number()) {
    if (p->size() != 1) {
      return Refuse("prompt",
                    absl::StrCat(p->size(), " prompts: walsh takes one prompt per request"));
    }
    one = &(*p)[0];
  }
  if (one->is_string()) {
    if (one->get<std::string>().empty()) return Refuse("prompt", "must not be empty");
    r.generate.set_text(one->get<std::string>());
  } else if (one->is_array()) {
    if (one->empty()) return Refuse("prompt", "must not be empty");
    for (size_t i = 0; i < one->size(); ++i) {
      const Json& id = (*one)[i];
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return Refuse(absl::StrCat("prompt[", i, "]"), "expected a token id");
      }
      r.generate.mutable_tokens()->add_ids(static_cast<int32_t>(id.get<int64_t>()));
    }
  } else {
    return Refuse("prompt", "expected a string or an array of token ids");
  }
  return absl::OkStatus();
}

absl::StatusOr<OpenAiRequest> ParseCompletion(const std::string& body) {
  ASSIGN_OR_RETURN(const Json j, ParseObject(body));
  OpenAiRequest r;
  r.chat = false;
  RETURN_IF_ERROR(ParseCommon(j, r));
  ASSIGN_OR_RETURN(const std::optional<bool> echo, Bool(j, "echo"));
  if (echo.value_or(false)) return Refuse("echo", "echoing the prompt is not supported");
  if (Get(j, "suffix") != nullptr) return Refuse("suffix", "insertion is not supported");
  ASSIGN_OR_RETURN(const std::optional<int64_t> best_of, Integer(j, "best_of", 1, 128));
  if (best_of && *best_of != 1) return Refuse("best_of", "only 1");
  ASSIGN_OR_RETURN(
      const std::optional<int64_t> logprobs,
      Integer(j, "logprobs", request_ranges::kLogprobs.lo, request_ranges::kLogprobs.hi));
  if (logprobs) {
    r.logprobs = true;
    r.generate.set_logprobs(static_cast<uint32_t>(*logprobs));
  }
  RETURN_IF_ERROR(ParseCompletionPrompt(j, r));
  r.field_names.emplace_back("logprobs", "logprobs");
  r.field_names.emplace_back("tokens.ids", "prompt");
  r.field_names.emplace_back("text", "prompt");
  r.field_names.emplace_back("prompt", "prompt");
  return r;
}

// Every value is checked before it is read, so nlohmann's exceptions cannot arise; should one
// (a check this file forgot: a bug), it becomes INTERNAL here instead of leaving the parser.
absl::StatusOr<OpenAiRequest> Guarded(absl::StatusOr<OpenAiRequest> (*parse)(const std::string&),
                                      const std::string& body) {
  try {
    return parse(body);
  } catch (const Json::exception& e) {
    return absl::InternalError(absl::StrCat("the request could not be read: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseChatCompletionRequest(const std::string& body) {
  return Guarded(ParseChat, body);
}

absl::StatusOr<OpenAiRequest> ParseCompletionRequest(const std::string& body) {
  return Guarded(ParseCompletion, body);
}

void JoinChatPieces(v1::GenerateRequest& generate) {
  if (!generate.has_pieces()) return;
  auto* pieces = generate.mutable_pieces()->mutable_pieces();
  if (std::any_of(pieces->begin(), pieces->end(),
                  [](const v1::PromptPiece& p) { return !p.image().empty(); })) {
    // Images stay pieces; the text around them is all markup, which tokenizes as joined text.
    for (v1::PromptPiece& p : *pieces) p.set_markup(p.image().empty());
    return;
  }
  std::string text;
  for (const v1::PromptPiece& p : generate.pieces().pieces()) text += p.text();
  generate.set_text(std::move(text));
}

}  // namespace walsh
