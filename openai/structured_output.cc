#include "openai/structured_output.h"

#include "absl/strings/str_cat.h"
#include "common/field_error.h"
#include "common/qwen_chat_template.h"
#include "constraint/constraint_spec.h"

namespace walsh {
namespace {

using Json = nlohmann::ordered_json;

// The compilers' messages begin with their own language's name.
std::string WithoutPrefix(std::string message, const std::string& prefix) {
  if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
  return message;
}

// An EBNF string literal of `text`.
std::string Literal(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Schema text for a tool's arguments: its parameters when walsh supports them (strict tools
// must), else any JSON object.
std::string ArgumentsSchema(const ToolSpec& t) {
  if (t.parameters.is_null()) return R"({"type": "object"})";
  const std::string text = t.parameters.dump();
  if (t.strict || ConstraintGrammarOnOwnStack({ConstraintSpec::Kind::kJsonSchema, text}).ok()) {
    return text;
  }
  return R"({"type": "object"})";
}

}  // namespace

absl::Status ApplyResponseFormat(const Json& rf, v1::GenerateRequest& g) {
  if (!rf.is_object()) return FieldError("response_format", "expected an object");
  auto type = rf.find("type");
  if (type == rf.end() || !type->is_string()) {
    return FieldError("response_format.type",
                      "expected \"text\", \"json_object\" or \"json_schema\"");
  }
  if (*type == "text") return absl::OkStatus();
  if (*type == "json_object") {
    g.set_json_object(true);
    return absl::OkStatus();
  }
  if (*type != "json_schema") {
    return FieldError("response_format.type",
                      "expected \"text\", \"json_object\" or \"json_schema\"");
  }
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object()) {
    return FieldError("response_format.json_schema", "expected an object");
  }
  auto name = js->find("name");
  if (name == js->end() || !name->is_string() || name->get<std::string>().empty()) {
    return FieldError("response_format.json_schema.name", "expected a non-empty string");
  }
  auto strict = js->find("strict");
  if (strict != js->end() && !strict->is_null() && !strict->is_boolean()) {
    return FieldError("response_format.json_schema.strict", "expected a boolean");
  }
  auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null()) {
    return FieldError("response_format.json_schema.schema", "is required");
  }
  const std::string text = schema->dump();
  if (absl::StatusOr<Grammar> grammar =
          ConstraintGrammarOnOwnStack({ConstraintSpec::Kind::kJsonSchema, text});
      !grammar.ok()) {
    return FieldError("response_format.json_schema.schema",
                      WithoutPrefix(std::string(grammar.status().message()), "json_schema: "));
  }
  g.set_json_schema(text);
  return absl::OkStatus();
}

std::string ToolCallGrammar(const std::vector<ToolSpec>& tools, ToolChoice choice,
                            const std::string& forced, bool parallel) {
  std::string out;
  if (choice == ToolChoice::kNamed) {
    for (const ToolSpec& t : tools) {
      if (t.name != forced) continue;
      // The prompt ends with the call's head: `<tool_call>\n{"name": "f", "arguments": `.
      absl::StrAppend(&out, "root ::= %json ", ArgumentsSchema(t), " ",
                      Literal(absl::StrCat("}\n", kToolCallClose)), "\n");
      return out;
    }
    return out;
  }
  absl::StrAppend(&out, "call ::= ", Literal(absl::StrCat(kToolCallOpen, "\n{\"name\": ")), " (");
  for (size_t i = 0; i < tools.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "\n    " : "\n  | ",
                    Literal(absl::StrCat(Json(tools[i].name).dump(), ", \"arguments\": ")),
                    " %json ", ArgumentsSchema(tools[i]));
  }
  absl::StrAppend(&out, "\n  ) ", Literal(absl::StrCat("}\n", kToolCallClose)), "\n");
  absl::StrAppend(&out, "calls ::= call", parallel ? " (\"\\n\" call)*" : "", "\n");
  if (choice == ToolChoice::kRequired) {
    absl::StrAppend(&out, "root ::= calls\n");
    return out;
  }
  // Free text that never spells "<tool_call>": free_i has matched its first i characters.
  const std::string tag = kToolCallOpen;
  absl::StrAppend(&out, "root ::= free0 calls?\n");
  for (size_t i = 0; i + 1 < tag.size(); ++i) {
    absl::StrAppend(&out, "free", i, " ::= \"\" | [^<", i > 0 ? tag.substr(i, 1) : "",
                    "] free0 | \"<\" free1");
    if (i > 0) absl::StrAppend(&out, " | ", Literal(tag.substr(i, 1)), " free", i + 1);
    absl::StrAppend(&out, "\n");
  }
  // free10 has matched "<tool_call": its '>' is not allowed.
  absl::StrAppend(&out, "free", tag.size() - 1, " ::= \"\" | [^<>] free0 | \"<\" free1\n");
  return out;
}

absl::Status ConstrainToolCalls(const std::vector<ToolSpec>& tools, ToolChoice choice,
                                const std::string& forced, bool parallel, v1::GenerateRequest& g) {
  if (choice == ToolChoice::kNone) return absl::OkStatus();
  bool any_strict = false;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (!tools[i].strict) continue;
    any_strict = true;
    if (tools[i].parameters.is_null()) continue;
    if (absl::StatusOr<Grammar> gr = ConstraintGrammarOnOwnStack(
            {ConstraintSpec::Kind::kJsonSchema, tools[i].parameters.dump()});
        !gr.ok()) {
      return FieldError(absl::StrCat("tools[", i, "].function.parameters"),
                        WithoutPrefix(std::string(gr.status().message()), "json_schema: "));
    }
  }
  if (choice == ToolChoice::kAuto && !any_strict) return absl::OkStatus();
  const std::string grammar = ToolCallGrammar(tools, choice, forced, parallel);
  if (absl::StatusOr<Grammar> gr =
          ConstraintGrammarOnOwnStack({ConstraintSpec::Kind::kGrammar, grammar});
      !gr.ok()) {
    return FieldError("tools", std::string(gr.status().message()));
  }
  if (g.constraint_case() != v1::GenerateRequest::CONSTRAINT_NOT_SET) {
    return FieldError("response_format",
                      "cannot be combined with a forced tool call or strict tools");
  }
  g.set_grammar(grammar);
  return absl::OkStatus();
}

}  // namespace walsh
