// The OpenAI API's structured output turned into walsh.v1 constraints (docs/structured_output.md):
// response_format (json_object, json_schema) and tool calls (a named tool_choice, "required",
// and strict tools under "auto") written as an EBNF grammar in Qwen's tool-call format with
// each function's parameters embedded by %json. Schemas are compiled here too, so a bad one is
// refused naming the OpenAI field.
#ifndef WALSH_OPENAI_STRUCTURED_OUTPUT_H_
#define WALSH_OPENAI_STRUCTURED_OUTPUT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "walsh/v1/generator.pb.h"

namespace walsh {

// Sets `g`'s constraint from response_format; "text" sets none. A refusal is a FieldError
// (common/field_error.h) naming the OpenAI field.
absl::Status ApplyResponseFormat(const nlohmann::ordered_json& response_format,
                                 v1::GenerateRequest& g);

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // null when the tool has none
  bool strict = false;
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// Sets `g`'s grammar for the tool calls the choice demands: a named tool's arguments (its
// call's head is already in the prompt), one or more calls for "required", and under "auto"
// (only when a tool is strict) free text without "<tool_call>", then any calls. Strict tools'
// arguments follow their parameters; other tools' follow them when walsh supports the schema
// and are any JSON object otherwise.
absl::Status ConstrainToolCalls(const std::vector<ToolSpec>& tools, ToolChoice choice,
                                const std::string& forced, bool parallel, v1::GenerateRequest& g);

// The EBNF grammar ConstrainToolCalls writes (for tests and docs).
std::string ToolCallGrammar(const std::vector<ToolSpec>& tools, ToolChoice choice,
                            const std::string& forced, bool parallel);

}  // namespace walsh

#endif  // WALSH_OPENAI_STRUCTURED_OUTPUT_H_
