#include "gateway/http/openai_request.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gateway/http/json_shape.h"
#include "gateway/http/structured_output.h"
#include "nlohmann/json.hpp"

namespace walsh {
namespace {

using Json = nlohmann::ordered_json;  // keeps the client's key order for the prompt

// Thrown only inside this file, caught by the two entry points.
struct Refusal {
  ApiError error;
};

[[noreturn]] void Refuse(const std::string& field, const std::string& why) {
  throw Refusal{BadField(field, why)};
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

// In [lo, hi], or (lo, hi] when `lo_open`: the message writes the range as the worker does.
std::optional<double> Number(const Json& obj, const char* key, double lo, double hi,
                             bool lo_open = false) {
  const Json* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) Refuse(key, absl::StrCat("expected a number, got ", TypeName(*v)));
  const double d = v->get<double>();
  if (!((lo_open ? d > lo : d >= lo) && d <= hi)) {
    Refuse(key, absl::StrCat(d, " is outside ", lo_open ? "(" : "[", lo, ", ", hi, "]"));
  }
  return d;
}

std::optional<int64_t> Integer(const Json& obj, const char* key, int64_t lo, int64_t hi) {
  const Json* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) Refuse(key, absl::StrCat("expected an integer, got ", TypeName(*v)));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    Refuse(key, absl::StrCat(v->get<uint64_t>(), " is outside [", lo, ", ", hi, "]"));
  }
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) Refuse(key, absl::StrCat(i, " is outside [", lo, ", ", hi, "]"));
  return i;
}

std::optional<bool> Bool(const Json& obj, const char* key) {
  const Json* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) Refuse(key, absl::StrCat("expected a boolean, got ", TypeName(*v)));
  return v->get<bool>();
}

std::optional<std::string> String(const Json& obj, const char* key) {
  const Json* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) Refuse(key, absl::StrCat("expected a string, got ", TypeName(*v)));
  return v->get<std::string>();
}

Json ParseObject(const std::string& body) {
  switch (CheckJsonShape(body)) {
    case JsonShape::kOk:
      break;
    case JsonShape::kInvalid:
      throw Refusal{ApiError{400, "the body is not valid JSON"}};
    case JsonShape::kTooDeep:
      throw Refusal{
          ApiError{400, absl::StrCat("the body nests deeper than ", kMaxJsonDepth, " levels")}};
    case JsonShape::kTooManyValues:
      throw Refusal{
          ApiError{400, absl::StrCat("the body holds more than ", kMaxJsonValues, " values")}};
  }
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Refusal{ApiError{400, "the body is not valid JSON"}};
  if (!j.is_object()) throw Refusal{ApiError{400, "the body must be a JSON object"}};
  return j;
}

// Fields both endpoints share: sampling, stopping, streaming.
void ParseCommon(const Json& j, OpenAiRequest& r) {
  if (auto m = String(j, "model")) r.model = *m;
  r.stream = Bool(j, "stream").value_or(false);
  if (const Json* so = Get(j, "stream_options")) {
    if (!so->is_object()) Refuse("stream_options", "expected an object");
    if (!r.stream) Refuse("stream_options", "only allowed when stream is true");
    auto u = so->find("include_usage");
    if (u != so->end() && !u->is_null()) {
      if (!u->is_boolean()) Refuse("stream_options.include_usage", "expected a boolean");
      r.include_usage = u->get<bool>();
    }
  }
  if (auto n = Integer(j, "n", 1, 128); n && *n != 1) {
    Refuse("n", absl::StrCat(*n, " choices: walsh returns one choice per request (n = 1); send ",
                             *n, " requests"));
  }
  if (const Json* rf = Get(j, "response_format")) {
    if (auto refused = ApplyResponseFormat(*rf, r.generate)) Refuse(refused->field, refused->why);
  }
  v1::SamplingParams& s = *r.generate.mutable_sampling();
  v1::StoppingCriteria& st = *r.generate.mutable_stopping();
  if (auto v = Number(j, "temperature", 0, 2)) s.set_temperature(static_cast<float>(*v));
  if (auto v = Number(j, "top_p", 0, 1, /*lo_open=*/true)) s.set_top_p(static_cast<float>(*v));
  if (auto v = Number(j, "presence_penalty", -2, 2)) s.set_presence_penalty(static_cast<float>(*v));
  if (auto v = Number(j, "frequency_penalty", -2, 2)) {
    s.set_frequency_penalty(static_cast<float>(*v));
  }
  // -1 and 0 are off (vLLM's and OpenAI clients' spellings); past the vocabulary is off too.
  if (auto v = Integer(j, "top_k", -1, INT32_MAX); v && *v > 0) {
    s.set_top_k(static_cast<int32_t>(*v));
  }
  if (auto v = Number(j, "min_p", 0, 1)) s.set_min_p(static_cast<float>(*v));
  if (auto v = Number(j, "repetition_penalty", 0, 10)) {
    s.set_repetition_penalty(static_cast<float>(*v));
  }
  if (auto v = Integer(j, "num_speculative_tokens", 0, 16)) {
    r.generate.set_num_speculative_tokens(static_cast<uint32_t>(*v));
  }
  if (const Json* seed = Get(j, "seed")) {
    if (!seed->is_number_integer()) Refuse("seed", "expected an integer");
    s.set_seed(seed->is_number_unsigned() ? seed->get<uint64_t>()
                                          : static_cast<uint64_t>(seed->get<int64_t>()));
  }
  if (const Json* lb = Get(j, "logit_bias")) {
    if (!lb->is_object()) Refuse("logit_bias", "expected an object of token id -> bias");
    for (const auto& [key, bias] : lb->items()) {
      // Digits only: SimpleAtoi alone would also take " 5" or "+5".
      int32_t id = 0;
      const bool digits = !key.empty() && std::all_of(key.begin(), key.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
      if (!digits || !absl::SimpleAtoi(key, &id)) {
        Refuse("logit_bias", absl::StrCat("key ", Quoted(key), " is not a token id"));
      }
      if (!bias.is_number() || !(bias.get<double>() >= -100 && bias.get<double>() <= 100)) {
        Refuse(absl::StrCat("logit_bias.", key), "expected a number in [-100, 100]");
      }
      (*s.mutable_logit_bias())[id] = bias.get<float>();
    }
  }
  const char* max_name = "max_tokens";
  std::optional<int64_t> max = Integer(j, "max_tokens", 1, UINT32_MAX);
  if (auto mc = Integer(j, "max_completion_tokens", 1, UINT32_MAX)) {
    max = mc;
    max_name = "max_completion_tokens";
  }
  if (max) st.set_max_tokens(static_cast<uint32_t>(*max));
  if (const Json* stop = Get(j, "stop")) {
    if (stop->is_string()) {
      st.add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) Refuse(absl::StrCat("stop[", i, "]"), "expected a string");
        st.add_stop((*stop)[i].get<std::string>());
      }
    } else {
      Refuse("stop", "expected a string or an array of strings");
    }
  }
  if (auto ie = Bool(j, "ignore_eos")) st.set_ignore_eos(*ie);
  if (auto user = String(j, "user"); user && user->size() > 256) Refuse("user", "over 256 bytes");

  r.field_names = {{"sampling.", ""},
                   {"stopping.max_tokens", max_name},
                   {"stopping.stop_token_ids", "stop_token_ids"},
                   {"stopping.stop", "stop"},
                   {"stopping.ignore_eos", "ignore_eos"},
                   {"json_schema", "response_format.json_schema.schema"},
                   {"json_object", "response_format"},
                   {"grammar", "tools"},
                   {"request_id", "x-request-id"}};
}

// Content: a string, or an array of {"type": "text", "text": ...} parts.
std::string MessageContent(const Json& m, size_t i) {
  const std::string field = absl::StrCat("messages[", i, "].content");
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) Refuse(field, "expected a string or an array of text parts");
  std::string out;
  for (size_t p = 0; p < it->size(); ++p) {
    const Json& part = (*it)[p];
    const std::string pf = absl::StrCat(field, "[", p, "]");
    if (!part.is_object()) Refuse(pf, "expected an object");
    auto type = part.find("type");
    if (type == part.end() || *type != "text") {
      Refuse(pf + ".type", "only \"text\" parts are supported (no images or audio)");
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) Refuse(pf + ".text", "expected a string");
    out += text->get<std::string>();
  }
  return out;
}

std::vector<RenderedToolCall> MessageToolCalls(const Json& m, size_t i) {
  std::vector<RenderedToolCall> calls;
  const Json* tc = Get(m, "tool_calls");
  if (tc == nullptr) return calls;
  const std::string field = absl::StrCat("messages[", i, "].tool_calls");
  if (!tc->is_array()) Refuse(field, "expected an array");
  for (size_t c = 0; c < tc->size(); ++c) {
    const std::string cf = absl::StrCat(field, "[", c, "]");
    const Json& call = (*tc)[c];
    const Json* fn = call.is_object() ? Get(call, "function") : nullptr;
    if (fn == nullptr || !fn->is_object()) Refuse(cf + ".function", "expected an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) Refuse(cf + ".function.name", "expected a string");
    RenderedToolCall out{name->get<std::string>(), "{}"};
    auto args = fn->find("arguments");
    if (args != fn->end() && !args->is_null()) {
      // A string goes into the prompt as written, as the template does; an object as tojson.
      if (args->is_string()) {
        out.arguments_json = args->get<std::string>();
      } else if (args->is_object()) {
        out.arguments_json = TemplateJson(*args);
      } else {
        Refuse(cf + ".function.arguments", "expected a JSON string");
      }
    }
    calls.push_back(std::move(out));
  }
  return calls;
}

void ParseMessages(const Json& j, ChatPrompt& prompt) {
  const Json* ms = Get(j, "messages");
  if (ms == nullptr) Refuse("messages", "is required");
  if (!ms->is_array() || ms->empty()) Refuse("messages", "expected a non-empty array");
  for (size_t i = 0; i < ms->size(); ++i) {
    const Json& m = (*ms)[i];
    if (!m.is_object()) Refuse(absl::StrCat("messages[", i, "]"), "expected an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      Refuse(absl::StrCat("messages[", i, "].role"), "expected a string");
    }
    ChatTurn t{role->get<std::string>(), MessageContent(m, i), {}};
    if (t.role == "developer") t.role = "system";
    if (t.role != "system" && t.role != "user" && t.role != "assistant" && t.role != "tool") {
      Refuse(absl::StrCat("messages[", i, "].role"),
             absl::StrCat(Quoted(t.role), " is not system, developer, user, assistant or tool"));
    }
    if (t.role == "assistant") t.tool_calls = MessageToolCalls(m, i);
    // Only an assistant turn that calls tools may go without content (as OpenAI's API).
    if (Get(m, "content") == nullptr && t.tool_calls.empty()) {
      Refuse(absl::StrCat("messages[", i, "].content"),
             absl::StrCat("is required for a ", t.role, " message",
                          t.role == "assistant" ? " without tool_calls" : ""));
    }
    prompt.turns.push_back(std::move(t));
  }
}

void ParseTools(const Json& j, ChatPrompt& prompt, OpenAiRequest& r) {
  if (Get(j, "functions") != nullptr || Get(j, "function_call") != nullptr) {
    Refuse(Get(j, "functions") != nullptr ? "functions" : "function_call",
           "the deprecated functions API is not supported; use tools and tool_choice");
  }
  std::vector<std::string> names;
  std::vector<ToolSpec> specs;
  if (const Json* tools = Get(j, "tools")) {
    if (!tools->is_array()) Refuse("tools", "expected an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string f = absl::StrCat("tools[", i, "]");
      if (!t.is_object()) Refuse(f, "expected an object");
      auto type = t.find("type");
      if (type == t.end() || *type != "function") Refuse(f + ".type", "only \"function\"");
      const Json* fn = Get(t, "function");
      if (fn == nullptr || !fn->is_object()) Refuse(f + ".function", "expected an object");
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
        Refuse(f + ".function.name", "expected a non-empty string");
      }
      if (auto same = std::find(names.begin(), names.end(), name->get<std::string>());
          same != names.end()) {
        Refuse(f + ".function.name",
               absl::StrCat(Quoted(*same), " is also the name of tools[", same - names.begin(),
                            "]; tool names must differ"));
      }
      names.push_back(name->get<std::string>());
      ToolSpec spec{name->get<std::string>(), nullptr, false};
      if (const Json* params = Get(*fn, "parameters")) spec.parameters = *params;
      if (const Json* strict = Get(*fn, "strict")) {
        if (!strict->is_boolean()) Refuse(f + ".function.strict", "expected a boolean");
        spec.strict = strict->get<bool>();
      }
      specs.push_back(std::move(spec));
      prompt.tools_json.push_back(TemplateJson(t));
    }
  }
  std::string choice = names.empty() ? "none" : "auto";
  if (const Json* tc = Get(j, "tool_choice")) {
    if (tc->is_string()) {
      choice = tc->get<std::string>();
      if (choice != "auto" && choice != "none" && choice != "required") {
        Refuse("tool_choice",
               "expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}");
      }
    } else if (tc->is_object()) {
      const Json* fn = Get(*tc, "function");
      const Json* name = fn != nullptr && fn->is_object() ? Get(*fn, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        Refuse("tool_choice.function.name", "expected a string");
      }
      r.forced_tool = name->get<std::string>();
      if (std::find(names.begin(), names.end(), r.forced_tool) == names.end()) {
        Refuse("tool_choice.function.name",
               absl::StrCat(Quoted(r.forced_tool), " is not one of the tools"));
      }
      choice = "named";
    } else {
      Refuse("tool_choice", "expected a string or an object");
    }
    if (choice != "none" && names.empty()) Refuse("tool_choice", "given without tools");
  }
  if (choice == "none") {
    prompt.tools_json.clear();  // the model is not told of tools it may not call
  } else {
    r.parse_tool_calls = true;
  }
  prompt.forced_tool = r.forced_tool;
  if (auto parallel = Bool(j, "parallel_tool_calls")) r.parallel_tool_calls = *parallel;
  const ToolChoice kind = choice == "none"       ? ToolChoice::kNone
                          : choice == "auto"     ? ToolChoice::kAuto
                          : choice == "required" ? ToolChoice::kRequired
                                                 : ToolChoice::kNamed;
  if (auto refused =
          ConstrainToolCalls(specs, kind, r.forced_tool, r.parallel_tool_calls, r.generate)) {
    Refuse(refused->field, refused->why);
  }
  r.tool_call_required = kind == ToolChoice::kRequired;
}

template <typename F>
absl::variant<OpenAiRequest, ApiError> Guarded(F parse) {
  try {
    return parse();
  } catch (const Refusal& r) {
    return r.error;
  } catch (const Json::exception& e) {  // a field this file forgot to check: a bug here
    return ApiError{500, absl::StrCat("the request could not be read: ", e.what()),
                    "internal_error"};
  }
}

}  // namespace

absl::variant<OpenAiRequest, ApiError> ParseChatCompletionRequest(const std::string& body) {
  return Guarded([&] {
    const Json j = ParseObject(body);
    OpenAiRequest r;
    r.chat = true;
    ParseCommon(j, r);
    ChatPrompt prompt;
    ParseMessages(j, prompt);
    ParseTools(j, prompt, r);
    if (const Json* kw = Get(j, "chat_template_kwargs")) {
      if (!kw->is_object()) Refuse("chat_template_kwargs", "expected an object");
      for (const auto& [key, value] : kw->items()) {
        if (key != "enable_thinking") {
          Refuse(absl::StrCat("chat_template_kwargs.", key), "unknown (only enable_thinking)");
        }
        if (!value.is_boolean()) {
          Refuse("chat_template_kwargs.enable_thinking", "expected a boolean");
        }
        prompt.enable_thinking = value.get<bool>();
      }
    }
    // A constraint from the first token (a response_format, a forced call) leaves no room for
    // reasoning: thinking is off for the request. Strict tools under "auto" allow any text
    // before the calls, reasoning included.
    const bool constrained_from_start =
        r.tool_call_required || r.generate.has_json_schema() || r.generate.json_object();
    if (constrained_from_start) prompt.enable_thinking = false;
    r.thinking = prompt.enable_thinking && r.forced_tool.empty();
    r.logprobs = Bool(j, "logprobs").value_or(false);
    if (auto top = Integer(j, "top_logprobs", 0, 20)) {
      if (!r.logprobs) Refuse("top_logprobs", "needs logprobs: true");
      r.generate.set_logprobs(static_cast<uint32_t>(*top));
    }
    for (PromptPart& part : RenderQwenChatParts(prompt)) {
      v1::PromptPiece* piece = r.generate.mutable_pieces()->add_pieces();
      piece->set_text(std::move(part.text));
      piece->set_markup(part.markup);
    }
    r.field_names.emplace_back("logprobs", "top_logprobs");
    r.field_names.emplace_back("pieces", "messages");
    r.field_names.emplace_back("text", "messages");
    r.field_names.emplace_back("prompt", "messages");
    return r;
  });
}

absl::variant<OpenAiRequest, ApiError> ParseCompletionRequest(const std::string& body) {
  return Guarded([&] {
    const Json j = ParseObject(body);
    OpenAiRequest r;
    r.chat = false;
    ParseCommon(j, r);
    if (Bool(j, "echo").value_or(false)) Refuse("echo", "echoing the prompt is not supported");
    if (Get(j, "suffix") != nullptr) Refuse("suffix", "insertion is not supported");
    if (auto b = Integer(j, "best_of", 1, 128); b && *b != 1) Refuse("best_of", "only 1");
    if (auto lp = Integer(j, "logprobs", 0, 20)) {
      r.logprobs = true;
      r.generate.set_logprobs(static_cast<uint32_t>(*lp));
    }
    const Json* p = Get(j, "prompt");
    if (p == nullptr) Refuse("prompt", "is required");
    const Json* one = p;
    if (p->is_array() && !p->empty() && !(*p)[0].is_number()) {
      if (p->size() != 1) {
        Refuse("prompt", absl::StrCat(p->size(), " prompts: walsh takes one prompt per request"));
      }
      one = &(*p)[0];
    }
    if (one->is_string()) {
      if (one->get<std::string>().empty()) Refuse("prompt", "must not be empty");
      r.generate.set_text(one->get<std::string>());
    } else if (one->is_array()) {
      if (one->empty()) Refuse("prompt", "must not be empty");
      for (size_t i = 0; i < one->size(); ++i) {
        const Json& id = (*one)[i];
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
          Refuse(absl::StrCat("prompt[", i, "]"), "expected a token id");
        }
        r.generate.mutable_tokens()->add_ids(static_cast<int32_t>(id.get<int64_t>()));
      }
    } else {
      Refuse("prompt", "expected a string or an array of token ids");
    }
    r.field_names.emplace_back("logprobs", "logprobs");
    r.field_names.emplace_back("tokens.ids", "prompt");
    r.field_names.emplace_back("text", "prompt");
    r.field_names.emplace_back("prompt", "prompt");
    return r;
  });
}

void JoinChatPieces(v1::GenerateRequest& generate) {
  if (!generate.has_pieces()) return;
  std::string text;
  for (const v1::PromptPiece& p : generate.pieces().pieces()) text += p.text();
  generate.set_text(std::move(text));
}

}  // namespace walsh
