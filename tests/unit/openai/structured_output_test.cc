// The OpenAI face's structured output in process (openai/structured_output.h): response_format
// and tool calls become the walsh.v1 constraint whose language is what the client asked for, and
// every refusal is a FieldError naming the OpenAI field.
#include "openai/structured_output.h"

#include <memory>
#include <string>
#include <vector>

#include "common/field_error.h"
#include "constraint/compiled_grammar.h"
#include "constraint/constraint_spec.h"
#include "constraint/token_trie.h"
#include "gtest/gtest.h"
#include "tests/util/full_match.h"

namespace walsh {
namespace {

using Json = nlohmann::ordered_json;

// The constraint `g` carries, compiled.
std::shared_ptr<const CompiledGrammar> CompiledConstraint(const v1::GenerateRequest& g) {
  ConstraintSpec spec;
  switch (g.constraint_case()) {
    case v1::GenerateRequest::kJsonSchema:
      spec = {ConstraintSpec::Kind::kJsonSchema, g.json_schema()};
      break;
    case v1::GenerateRequest::kJsonObject:
      spec = {ConstraintSpec::Kind::kJsonObject, ""};
      break;
    case v1::GenerateRequest::kGrammar:
      spec = {ConstraintSpec::Kind::kGrammar, g.grammar()};
      break;
    default:
      ADD_FAILURE() << "no grammar constraint";
      return nullptr;
  }
  absl::StatusOr<Grammar> grammar = ConstraintGrammar(spec);
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  if (!grammar.ok()) return nullptr;
  auto trie = std::make_shared<const TokenTrie>(std::vector<std::string>{"a", "{"});
  return std::make_shared<const CompiledGrammar>(*grammar, trie);
}

using testing::FullMatch;

void ExpectField(const absl::Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(FieldOf(s), field) << s;
}

TEST(ResponseFormat, EachTypeBecomesItsConstraint) {
  v1::GenerateRequest text;
  ASSERT_TRUE(ApplyResponseFormat(Json{{"type", "text"}}, text).ok());
  EXPECT_EQ(text.constraint_case(), v1::GenerateRequest::CONSTRAINT_NOT_SET);

  v1::GenerateRequest object;
  ASSERT_TRUE(ApplyResponseFormat(Json{{"type", "json_object"}}, object).ok());
  ASSERT_TRUE(object.json_object());
  auto any = CompiledConstraint(object);
  ASSERT_NE(any, nullptr);
  EXPECT_TRUE(FullMatch(*any, R"({"x": [1, "y"]})"));
  EXPECT_FALSE(FullMatch(*any, "[1]"));

  v1::GenerateRequest schema;
  const Json rf = Json::parse(R"({"type": "json_schema", "json_schema": {"name": "point",
      "strict": true, "schema": {"type": "object", "properties": {"x": {"type": "integer"}},
      "required": ["x"], "additionalProperties": false}}})");
  ASSERT_TRUE(ApplyResponseFormat(rf, schema).ok());
  ASSERT_EQ(schema.constraint_case(), v1::GenerateRequest::kJsonSchema);
  auto point = CompiledConstraint(schema);
  ASSERT_NE(point, nullptr);
  EXPECT_TRUE(FullMatch(*point, R"({"x": 3})"));
  EXPECT_FALSE(FullMatch(*point, R"({"x": "3"})"));
  EXPECT_FALSE(FullMatch(*point, R"({})"));
}

TEST(ResponseFormat, RefusalsNameTheOpenAiField) {
  const auto refused = [](const char* json, const std::string& field) {
    v1::GenerateRequest g;
    ExpectField(ApplyResponseFormat(Json::parse(json), g), field);
    EXPECT_EQ(g.constraint_case(), v1::GenerateRequest::CONSTRAINT_NOT_SET) << json;
  };
  refused(R"("json")", "response_format");
  refused(R"({"type": "xml"})", "response_format.type");
  refused(R"({})", "response_format.type");
  refused(R"({"type": "json_schema"})", "response_format.json_schema");
  refused(R"({"type": "json_schema", "json_schema": {"schema": {}}})",
          "response_format.json_schema.name");
  refused(R"({"type": "json_schema", "json_schema": {"name": "n", "strict": "yes", "schema": {}}})",
          "response_format.json_schema.strict");
  refused(R"({"type": "json_schema", "json_schema": {"name": "n"}})",
          "response_format.json_schema.schema");
  refused(R"({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "bogus"}}})",
          "response_format.json_schema.schema");
}

const std::vector<ToolSpec> kTools = {
    {"get_weather", Json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"], "additionalProperties": false})"),
     true},
    {"now", nullptr, false},
};

TEST(ToolCalls, ANamedToolsArgumentsFollowItsParameters) {
  v1::GenerateRequest g;
  ASSERT_TRUE(ConstrainToolCalls(kTools, ToolChoice::kNamed, "get_weather", false, g).ok());
  EXPECT_EQ(g.grammar(), ToolCallGrammar(kTools, ToolChoice::kNamed, "get_weather", false));
  auto named = CompiledConstraint(g);
  ASSERT_NE(named, nullptr);
  // The prompt ends with the call's head; the output is the arguments and the call's end.
  EXPECT_TRUE(FullMatch(*named, "{\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_FALSE(FullMatch(*named, "{\"town\": \"Paris\"}}\n</tool_call>"));
  EXPECT_FALSE(FullMatch(*named, "{\"city\": \"Paris\"}"));
}

TEST(ToolCalls, RequiredAndAutoShapeTheCallsAndTheText) {
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  const std::string now = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  v1::GenerateRequest required;
  ASSERT_TRUE(ConstrainToolCalls(kTools, ToolChoice::kRequired, "", true, required).ok());
  auto calls = CompiledConstraint(required);
  ASSERT_NE(calls, nullptr);
  EXPECT_TRUE(FullMatch(*calls, weather));
  EXPECT_TRUE(FullMatch(*calls, weather + "\n" + now));
  EXPECT_FALSE(FullMatch(*calls, "It is sunny."));
  EXPECT_FALSE(FullMatch(*calls, ""));

  v1::GenerateRequest single;
  ASSERT_TRUE(ConstrainToolCalls(kTools, ToolChoice::kRequired, "", false, single).ok());
  auto one = CompiledConstraint(single);
  ASSERT_NE(one, nullptr);
  EXPECT_FALSE(FullMatch(*one, weather + "\n" + now));

  // Under "auto" with a strict tool: free text that never spells the call tag, then calls.
  v1::GenerateRequest free;
  ASSERT_TRUE(ConstrainToolCalls(kTools, ToolChoice::kAuto, "", true, free).ok());
  auto text = CompiledConstraint(free);
  ASSERT_NE(text, nullptr);
  EXPECT_TRUE(FullMatch(*text, "It is <b>sunny</b>."));
  EXPECT_TRUE(FullMatch(*text, "Let me look." + weather));
  EXPECT_FALSE(FullMatch(*text, "<tool_call> by hand"));

  // Without a strict tool, "auto" and "none" constrain nothing.
  v1::GenerateRequest loose;
  ASSERT_TRUE(ConstrainToolCalls({kTools[1]}, ToolChoice::kAuto, "", true, loose).ok());
  ASSERT_TRUE(ConstrainToolCalls(kTools, ToolChoice::kNone, "", true, loose).ok());
  EXPECT_EQ(loose.constraint_case(), v1::GenerateRequest::CONSTRAINT_NOT_SET);
}

TEST(ToolCalls, RefusalsNameTheToolOrTheClash) {
  std::vector<ToolSpec> bad = kTools;
  bad[0].parameters = Json::parse(R"({"type": "bogus"})");
  v1::GenerateRequest g;
  ExpectField(ConstrainToolCalls(bad, ToolChoice::kRequired, "", false, g),
              "tools[0].function.parameters");

  v1::GenerateRequest both;
  ASSERT_TRUE(ApplyResponseFormat(Json{{"type", "json_object"}}, both).ok());
  ExpectField(ConstrainToolCalls(kTools, ToolChoice::kNamed, "now", false, both),
              "response_format");
}

}  // namespace
}  // namespace walsh
