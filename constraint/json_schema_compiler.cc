#include "constraint/json_schema_compiler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_shape.h"
#include "common/status_macros.h"
#include "constraint/number_range.h"
#include "constraint/pattern_cursor.h"
#include "constraint/regex_compiler.h"
#include "constraint/schema_algebra.h"
#include "constraint/schema_kinds.h"
#include "nlohmann/json.hpp"

namespace walsh {
namespace {

using Json = SchemaJson;

const std::set<std::string>& Supported() {
  static const auto* s = new std::set<std::string>{"type",
                                                   "properties",
                                                   "required",
                                                   "additionalProperties",
                                                   "items",
                                                   "prefixItems",
                                                   "enum",
                                                   "const",
                                                   "anyOf",
                                                   "oneOf",
                                                   "$ref",
                                                   "pattern",
                                                   "minLength",
                                                   "maxLength",
                                                   "minItems",
                                                   "maxItems",
                                                   "format",
                                                   "allOf",
                                                   "minimum",
                                                   "maximum",
                                                   "exclusiveMinimum",
                                                   "exclusiveMaximum",
                                                   "contains",
                                                   "minContains",
                                                   "unevaluatedProperties",
                                                   "unevaluatedItems",
                                                   "propertyNames",
                                                   "minProperties",
                                                   "maxProperties",
                                                   "if",
                                                   "then",
                                                   "else",
                                                   "not",
                                                   "uniqueItems"};
  return *s;
}

// The texts of a JSON string's formats, as regexes over the string's characters.
const std::map<std::string, std::string>& Formats() {
  static const std::string kDate =
      "\\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|"
      "02-(0[1-9]|1\\d|2[0-8]))";
  static const std::string kTime =
      "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,9})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
  static const auto* f = new std::map<std::string, std::string>{
      {"date", kDate},
      {"time", kTime},
      {"date-time", kDate + "T" + kTime},
      {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
      {"email",
       "[a-zA-Z0-9_+-]+(\\.[a-zA-Z0-9_+-]+)*@[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
       "(\\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)+"},
  };
  return *f;
}

// Characters a JSON string holds unescaped.
std::vector<CodepointRange> Unescaped() { return {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}; }

std::string PointerToken(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

constexpr size_t kMaxRefs = 256;
constexpr int kMaxSchemaNesting = 128;

class SchemaCompiler {
 public:
  // `root` null: any JSON object.
  SchemaCompiler(Grammar& g, const Json* root) : root_(root), g_(g) {}

  absl::StatusOr<GrammarElement> Compile() {
    if (root_ == nullptr) return Grammar::Ref(AnyObject());
    return Schema(*root_, "");
  }

 private:
  static absl::Status Error(const std::string& path, absl::string_view message) {
    return absl::InvalidArgumentError(
        absl::StrCat("json_schema: at ", path.empty() ? "/" : path, ": ", message));
  }

  // Shared rules, built on first use.
  int32_t Ws() {
    if (ws_ < 0) {
      ws_ = g_.NewRule("ws");
      g_.AddAlternative(ws_, {Grammar::Byte(' ')});
      g_.AddAlternative(ws_, {});
    }
    return ws_;
  }
  int32_t StringChar() {
    if (string_char_ >= 0) return string_char_;
    string_char_ = g_.NewRule("string-char");
    g_.AddAlternative(string_char_, {g_.Chars(Unescaped())});
    GrammarElement simple = Grammar::Bytes({{'"', '"'},
                                            {'\\', '\\'},
                                            {'/', '/'},
                                            {'b', 'b'},
                                            {'f', 'f'},
                                            {'n', 'n'},
                                            {'r', 'r'},
                                            {'t', 't'}});
    g_.AddAlternative(string_char_, {Grammar::Byte('\\'), simple});
    // \uXXXX outside the surrogates: a character counts once however it is written.
    const GrammarElement hex = Grammar::Bytes({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
    const GrammarElement not_d =
        Grammar::Bytes({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}});
    g_.AddAlternative(string_char_,
                      {Grammar::Byte('\\'), Grammar::Byte('u'), not_d, hex, hex, hex});
    g_.AddAlternative(string_char_, {Grammar::Byte('\\'), Grammar::Byte('u'),
                                     Grammar::Bytes({{'d', 'd'}, {'D', 'D'}}),
                                     Grammar::Bytes({{'0', '7'}}), hex, hex});
    return string_char_;
  }
  absl::StatusOr<GrammarElement> StringOfLength(int64_t min, int64_t max) {
    GrammarElement body;
    RETURN_IF_ERROR(g_.Repeat({Grammar::Ref(StringChar())}, min, max, body));
    const int32_t r = g_.NewRule("string");
    g_.AddAlternative(r, {Grammar::Byte('"'), body, Grammar::Byte('"')});
    return Grammar::Ref(r);
  }
  int32_t String() {
    if (string_ < 0) string_ = StringOfLength(0, -1)->rule;
    return string_;
  }
  absl::StatusOr<int32_t> RegexRule(const std::string& pattern) {
    return AddRegexRule(g_, pattern, {{0, 0x10FFFF}});
  }
  int32_t Integer() {
    if (integer_ < 0) integer_ = *RegexRule("-?(0|[1-9]\\d{0,15})");
    return integer_;
  }
  int32_t Number() {
    if (number_ < 0) {
      number_ = *RegexRule("-?(0|[1-9]\\d{0,15})(\\.\\d{1,16})?([eE][+-]?\\d{1,2})?");
    }
    return number_;
  }
  int32_t Value() {
    if (value_ >= 0) return value_;
    value_ = g_.NewRule("value");
    object_ = g_.NewRule("object");
    const int32_t array = g_.NewRule("array");
    const int32_t member = g_.NewRule("member");
    const int32_t ws = Ws();
    for (const GrammarElement& e : {Grammar::Ref(object_), Grammar::Ref(array),
                                    Grammar::Ref(String()), Grammar::Ref(Number())}) {
      g_.AddAlternative(value_, {e});
    }
    for (const char* lit : {"true", "false", "null"}) {
      g_.AddAlternative(value_, Grammar::Literal(lit));
    }
    g_.AddAlternative(member, {Grammar::Ref(String()), Grammar::Byte(':'), Grammar::Ref(ws),
                               Grammar::Ref(value_)});
    GrammarElement more_members, more_values;
    (void)g_.Repeat({Grammar::Byte(','), Grammar::Ref(ws), Grammar::Ref(member)}, 0, -1,
                    more_members);
    (void)g_.Repeat({Grammar::Byte(','), Grammar::Ref(ws), Grammar::Ref(value_)}, 0, -1,
                    more_values);
    g_.AddAlternative(object_, Grammar::Literal("{}"));
    g_.AddAlternative(object_,
                      {Grammar::Byte('{'), Grammar::Ref(member), more_members, Grammar::Byte('}')});
    g_.AddAlternative(array, Grammar::Literal("[]"));
    g_.AddAlternative(array,
                      {Grammar::Byte('['), Grammar::Ref(value_), more_values, Grammar::Byte(']')});
    return value_;
  }
  int32_t AnyObject() {
    Value();
    return object_;
  }

  absl::StatusOr<GrammarElement> Schema(const Json& s, const std::string& path) {
    if (depth_ >= kMaxSchemaNesting) {
      return Error(path, absl::StrCat("subschemas nested (or inlined) more than ",
                                      kMaxSchemaNesting, " deep"));
    }
    ++depth_;
    absl::StatusOr<GrammarElement> e = SchemaAtDepth(s, path);
    --depth_;
    return e;
  }

  absl::StatusOr<GrammarElement> SchemaAtDepth(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Error(path, "a false schema: no value is valid here");
      return Grammar::Ref(Value());
    }
    if (!s.is_object()) return Error(path, "a schema must be an object or a boolean");
    std::vector<std::string> keywords;
    for (const auto& [key, v] : s.items()) {
      if (IsSchemaAnnotation(key)) continue;
      if (!Supported().count(key)) return Error(path, absl::StrCat("'", key, "' is not supported"));
      keywords.push_back(key);
    }
    // Combinations: intersected into one schema first (schema_algebra.h).
    auto combined = [&](absl::StatusOr<Json> flat) -> absl::StatusOr<GrammarElement> {
      if (!flat.ok()) return Error(path, flat.status().message());
      if (flat->is_boolean() && !flat->get<bool>()) {
        return Error(path, "the schemas combined here accept no value");
      }
      return Schema(*flat, path);
    };
    const SchemaResolver resolve = [this](const std::string& ref) { return Lookup(ref); };
    if (s.contains("if") || s.contains("then") || s.contains("else")) {
      // The outputs are those of `if` and `then` together: they satisfy the condition, so
      // `else` never applies to them.
      Json rest = s;
      for (const char* k : {"if", "then", "else"}) rest.erase(k);
      if (!s.contains("if")) return Schema(rest, path);
      absl::StatusOr<Json> both = IntersectSchemas(rest, s["if"], resolve);
      if (both.ok() && s.contains("then")) both = IntersectSchemas(*both, s["then"], resolve);
      return combined(std::move(both));
    }
    if (s.contains("not")) {
      Json rest = s;
      rest.erase("not");
      ASSIGN_OR_RETURN(rest, WithoutTypes(rest, s["not"], path + "/not"));
      return Schema(rest, path);
    }
    if (s.contains("uniqueItems")) {
      if (!s["uniqueItems"].is_boolean()) return Error(path + "/uniqueItems", "must be a boolean");
      if (s["uniqueItems"].get<bool>()) {
        return Error(path + "/uniqueItems", "'uniqueItems: true' is not supported");
      }
      Json rest = s;
      rest.erase("uniqueItems");
      return Schema(rest, path);
    }
    if (s.contains("allOf") || (s.contains("$ref") && keywords.size() > 1)) {
      return combined(FlattenSchema(s, resolve));
    }
    for (const char* any : {"anyOf", "oneOf"}) {
      if (!s.contains(any) || keywords.size() == 1) continue;
      Json rest = s;
      rest.erase(any);
      // unevaluated* beside the branches: what a branch evaluates counts, so they apply to each
      // branch once merged.
      Json unevaluated = Json::object();
      for (const char* k : {"unevaluatedProperties", "unevaluatedItems"}) {
        if (rest.contains(k)) unevaluated[k] = rest[k], rest.erase(k);
      }
      if (!s[any].is_array()) return Error(absl::StrCat(path, "/", any), "must be an array");
      Json branches = Json::array();
      for (const Json& b : s[any]) {
        absl::StatusOr<Json> both = IntersectSchemas(rest, b, resolve);
        if (both.ok() && both->is_object()) {
          for (const auto& [k, v] : unevaluated.items()) (*both)[k] = v;
        }
        if (!both.ok()) return Error(path, both.status().message());
        if (!(both->is_boolean() && !both->get<bool>())) branches.push_back(*both);
      }
      if (branches.empty()) return Error(path, absl::StrCat("no branch of '", any, "' can hold"));
      Json only = Json::object();
      only[any] = branches;
      return Schema(only, path);
    }
    if ((s.contains("enum") || s.contains("const")) && keywords.size() > 1) {
      Json rest = s;
      rest.erase("enum");
      rest.erase("const");
      if (s.contains("enum") && !s["enum"].is_array()) {
        return Error(path + "/enum", "must be a non-empty array");
      }
      // With both, the one value is the const, if the enum holds it.
      Json values = s.contains("enum") ? s["enum"] : Json::array();
      if (s.contains("const")) {
        bool listed = !s.contains("enum");
        for (const Json& v : values) {
          listed = listed || SameJsonValue(v, s["const"]);
        }
        values = listed ? Json::array({s["const"]}) : Json::array();
      }
      Json kept = Json::array();
      for (const Json& v : values) {
        absl::StatusOr<bool> ok = SchemaAdmits(rest, v, resolve);
        if (!ok.ok()) return Error(path, ok.status().message());
        if (*ok) kept.push_back(v);
      }
      if (kept.empty()) return Error(path, "no enum or const value satisfies the other keywords");
      Json only = Json::object();
      only["enum"] = kept;
      return Schema(only, path);
    }
    for (const char* alone : {"$ref", "anyOf", "oneOf", "enum", "const"}) {
      if (s.contains(alone) && keywords.size() > 1) {
        // "type" beside enum/const restates what the values already are.
        bool only_type = keywords.size() == 2 && s.contains("type") &&
                         (std::string(alone) == "enum" || std::string(alone) == "const");
        if (!only_type) {
          return Error(path, absl::StrCat("'", alone, "' beside other keywords is not supported"));
        }
      }
    }
    if (s.contains("$ref")) return Ref(s["$ref"], path + "/$ref");
    if (s.contains("const")) {
      const int32_t r = g_.NewRule("const");
      g_.AddAlternative(r, Grammar::Literal(s["const"].dump()));
      return Grammar::Ref(r);
    }
    if (s.contains("enum")) {
      const Json& values = s["enum"];
      if (!values.is_array() || values.empty()) {
        return Error(path + "/enum", "must be a non-empty array");
      }
      const int32_t r = g_.NewRule("enum");
      std::vector<std::string> literals;
      for (const Json& v : values) literals.push_back(v.dump());
      g_.AddLiterals(r, std::move(literals));
      return Grammar::Ref(r);
    }
    for (const char* any : {"anyOf", "oneOf"}) {
      if (!s.contains(any)) continue;
      const Json& branches = s[any];
      const std::string at = absl::StrCat(path, "/", any);
      if (!branches.is_array() || branches.empty()) return Error(at, "must be a non-empty array");
      if (std::string(any) == "oneOf") RETURN_IF_ERROR(CheckOneOfDisjoint(branches, at));
      const int32_t r = g_.NewRule(any);
      for (size_t i = 0; i < branches.size(); ++i) {
        if (branches[i].is_boolean() && !branches[i].get<bool>()) continue;
        ASSIGN_OR_RETURN(GrammarElement e, Schema(branches[i], absl::StrCat(at, "/", i)));
        g_.AddAlternative(r, {e});
      }
      if (g_.rules()[r].alternatives.empty()) return Error(at, "every branch is false");
      return Grammar::Ref(r);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& x : t) {
          if (!x.is_string()) return Error(path + "/type", "must be a string or strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Error(path + "/type", "must be a string or a non-empty array of strings");
      }
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties") || s.contains("unevaluatedProperties") ||
               s.contains("propertyNames") || s.contains("minProperties") ||
               s.contains("maxProperties")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems") || s.contains("unevaluatedItems") || s.contains("contains")) {
      types = {"array"};
    } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") ||
               s.contains("format")) {
      types = {"string"};
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      types = {"number"};
    } else {
      return Grammar::Ref(Value());
    }
    const int32_t r = g_.NewRule("type");
    for (const std::string& type : types) {
      GrammarElement e;
      if (type == "string") {
        ASSIGN_OR_RETURN(e, StringSchema(s, path));
      } else if (type == "integer" || type == "number") {
        ASSIGN_OR_RETURN(e, NumberSchema(s, path, type == "integer"));
      } else if (type == "boolean") {
        const int32_t b = g_.NewRule("boolean");
        g_.AddAlternative(b, Grammar::Literal("true"));
        g_.AddAlternative(b, Grammar::Literal("false"));
        e = Grammar::Ref(b);
      } else if (type == "null") {
        const int32_t n = g_.NewRule("null");
        g_.AddAlternative(n, Grammar::Literal("null"));
        e = Grammar::Ref(n);
      } else if (type == "object") {
        ASSIGN_OR_RETURN(e, ObjectSchema(s, path));
      } else if (type == "array") {
        ASSIGN_OR_RETURN(e, ArraySchema(s, path));
      } else {
        return Error(path + "/type", absl::StrCat("unknown type '", type, "'"));
      }
      g_.AddAlternative(r, {e});
    }
    return Grammar::Ref(r);
  }

  absl::StatusOr<int64_t> Count(const Json& s, const char* key, const std::string& path,
                                int64_t absent) {
    if (!s.contains(key)) return absent;
    const Json& v = s[key];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
      return Error(absl::StrCat(path, "/", key), "must be a non-negative integer");
    }
    const uint64_t n = v.get<uint64_t>();
    if (n > static_cast<uint64_t>(kMaxRepetition)) {
      return Error(absl::StrCat(path, "/", key),
                   absl::StrCat("above the supported bound of ", kMaxRepetition));
    }
    return static_cast<int64_t>(n);
  }

  // Bounds as the integers that meet them: [lo, hi].
  absl::StatusOr<GrammarElement> NumberSchema(const Json& s, const std::string& path,
                                              bool integer) {
    std::optional<int64_t> lo, hi;
    constexpr double kLimit = 1e16;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_number()) return Error(absl::StrCat(path, "/", key), "must be a number");
      const double v = s[key].get<double>();
      const std::string k = key;
      // Integers exactly (a double cannot hold every one past 2^53); others rounded inward.
      const bool exact = s[key].is_number_integer() && std::abs(v) <= kLimit;
      const int64_t whole = exact ? s[key].get<int64_t>() : 0;
      if (k == "minimum" || k == "exclusiveMinimum") {
        if (v < -kLimit) continue;
        const int64_t b = exact ? (k == "minimum" ? whole : whole + 1)
                                : static_cast<int64_t>(std::min<double>(
                                      kLimit, k == "minimum" ? std::ceil(v) : std::floor(v) + 1));
        lo = lo ? std::max(*lo, b) : b;
      } else {
        if (v > kLimit) continue;
        const int64_t b = exact ? (k == "maximum" ? whole : whole - 1)
                                : static_cast<int64_t>(std::max<double>(
                                      -kLimit, k == "maximum" ? std::floor(v) : std::ceil(v) - 1));
        hi = hi ? std::min(*hi, b) : b;
      }
    }
    if (!lo && !hi) return Grammar::Ref(integer ? Integer() : Number());
    const std::string pattern = integer ? IntegerRangeRegex(lo, hi) : NumberRangeRegex(lo, hi);
    if (pattern.empty()) return Error(path, "no number in range the bounds allow");
    absl::StatusOr<int32_t> r = RegexRule(pattern);
    if (!r.ok()) return Error(path, r.status().message());
    return Grammar::Ref(*r);
  }

  absl::StatusOr<const Json*> Lookup(const std::string& target) {
    if (target.empty() || target[0] != '#') {
      return absl::InvalidArgumentError(absl::StrCat(
          "only references inside the schema ('#...') are supported, not '", target, "'"));
    }
    // The fragment is URI-encoded: %25 is '%'.
    std::string fragment;
    for (size_t i = 1; i < target.size(); ++i) {
      if (target[i] == '%' && i + 2 < target.size() && std::isxdigit(target[i + 1]) &&
          std::isxdigit(target[i + 2])) {
        fragment += static_cast<char>(std::stoi(target.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        fragment += target[i];
      }
    }
    Json::json_pointer pointer;
    try {
      pointer = Json::json_pointer(fragment);
    } catch (const std::exception&) {
      return absl::InvalidArgumentError(absl::StrCat("'", target, "' is not a JSON pointer"));
    }
    try {
      if (root_->contains(pointer)) return &root_->at(pointer);
    } catch (const std::exception&) {  // an array index out of range or not a number
    }
    return absl::InvalidArgumentError(absl::StrCat("'", target, "' points at nothing"));
  }

  absl::StatusOr<GrammarElement> StringSchema(const Json& s, const std::string& path) {
    ASSIGN_OR_RETURN(int64_t min, Count(s, "minLength", path, 0));
    ASSIGN_OR_RETURN(int64_t max, Count(s, "maxLength", path, -1));
    if (max >= 0 && max < min) return Error(path, "maxLength is below minLength");
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    std::string pattern;
    std::string where;
    if (s.contains("format")) {
      where = path + "/format";
      if (!s["format"].is_string()) return Error(where, "must be a string");
      auto it = Formats().find(s["format"].get<std::string>());
      if (it == Formats().end()) {
        return Error(
            where, absl::StrCat("format '", s["format"].get<std::string>(), "' is not supported"));
      }
      pattern = it->second;
    }
    if (s.contains("pattern")) {
      where = path + "/pattern";
      if (!s["pattern"].is_string()) return Error(where, "must be a string");
      if (!pattern.empty()) return Error(path, "'pattern' beside 'format' is not supported");
      pattern = s["pattern"].get<std::string>();
    }
    if (!where.empty()) {
      if (lengths) {
        return Error(path, "'minLength'/'maxLength' beside a pattern or format is not supported");
      }
      absl::StatusOr<int32_t> body = AddRegexRule(g_, pattern, Unescaped());
      if (!body.ok()) return Error(where, body.status().message());
      const int32_t r = g_.NewRule("pattern-string");
      g_.AddAlternative(r, {Grammar::Byte('"'), Grammar::Ref(*body), Grammar::Byte('"')});
      return Grammar::Ref(r);
    }
    if (!lengths) return Grammar::Ref(String());
    return StringOfLength(min, max);
  }

  // An object key that is none of `names`, written without escapes (so no escape can spell a
  // listed name).
  GrammarElement OtherKey(const std::vector<std::string>& names) {
    if (names.empty()) return Grammar::Ref(String());
    std::vector<std::vector<uint32_t>> cps;
    for (const std::string& n : names) {
      std::vector<uint32_t> v;
      for (size_t i = 0; i < n.size();) {  // names came from parsed JSON: valid UTF-8
        const uint8_t b = static_cast<uint8_t>(n[i]);
        const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
        uint32_t cp = len == 1 ? b : b & (0xFF >> (len + 1));
        for (int k = 1; k < len && i + k < n.size(); ++k) cp = (cp << 6) | (n[i + k] & 0x3F);
        v.push_back(cp);
        i += len;
      }
      cps.push_back(std::move(v));
    }
    const int32_t rest = g_.NewRule("key-rest");
    GrammarElement tail;
    (void)g_.Repeat({g_.Chars(Unescaped())}, 0, -1, tail);
    g_.AddAlternative(rest, {tail, Grammar::Byte('"')});
    // A trie of the names' characters, then one rule per node: '"' ends a key unless the node
    // is a whole name; a child's character goes on in that child; any other goes on freely.
    struct Node {
      std::map<uint32_t, int32_t> children;
      bool complete = false;
      int32_t rule = -1;
    };
    std::vector<Node> trie(1);
    for (const auto& n : cps) {
      int32_t at = 0;
      for (uint32_t c : n) {
        auto [it, fresh] = trie[at].children.try_emplace(c, static_cast<int32_t>(trie.size()));
        if (fresh) trie.emplace_back();
        at = it->second;
      }
      trie[at].complete = true;
    }
    for (Node& node : trie) node.rule = g_.NewRule("key");
    for (Node& node : trie) {
      if (!node.complete) g_.AddAlternative(node.rule, {Grammar::Byte('"')});
      std::vector<CodepointRange> others = Unescaped();
      for (const auto& [c, child] : node.children) {
        g_.AddAlternative(node.rule, {g_.Chars({{c, c}}), Grammar::Ref(trie[child].rule)});
        others = Intersect(others, Complement({{c, c}}));
      }
      g_.AddAlternative(node.rule, {g_.Chars(others), Grammar::Ref(rest)});
    }
    const int32_t start = g_.NewRule("other-key");
    g_.AddAlternative(start, {Grammar::Byte('"'), Grammar::Ref(trie[0].rule)});
    return Grammar::Ref(start);
  }

  absl::StatusOr<GrammarElement> ObjectSchema(const Json& s, const std::string& path) {
    struct Member {
      std::string name;
      GrammarElement value;
      bool required;
    };
    std::vector<Member> members;
    std::vector<std::string> names;
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) return Error(path + "/required", "must be an array of strings");
      for (const Json& n : r) {
        if (!n.is_string()) return Error(path + "/required", "must be an array of strings");
        required.insert(n.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      const Json& props = s["properties"];
      if (!props.is_object()) return Error(path + "/properties", "must be an object");
      for (const auto& [name, schema] : props.items()) {
        const std::string at = absl::StrCat(path, "/properties/", PointerToken(name));
        names.push_back(name);
        if (schema.is_boolean() && !schema.get<bool>()) {
          if (required.count(name)) return Error(at, "a required property whose schema is false");
          continue;
        }
        ASSIGN_OR_RETURN(GrammarElement v, Schema(schema, at));
        members.push_back({name, v, required.count(name) > 0});
      }
    }
    // Additional members: absent means none when properties are listed, any otherwise. Here
    // (no applicator beside it) unevaluatedProperties means what additionalProperties does.
    std::optional<GrammarElement> extra;
    const char* extra_key =
        !s.contains("additionalProperties") && s.contains("unevaluatedProperties")
            ? "unevaluatedProperties"
            : "additionalProperties";
    const std::string extra_at = absl::StrCat(path, "/", extra_key);
    const bool listed = s.contains("properties") || s.contains("required");
    if (!s.contains(extra_key)) {
      if (!s.contains("properties")) extra = Grammar::Ref(Value());
    } else if (const Json& a = s[extra_key]; a.is_boolean()) {
      if (a.get<bool>()) extra = Grammar::Ref(Value());
    } else {
      ASSIGN_OR_RETURN(GrammarElement e, Schema(a, extra_at));
      extra = e;
    }
    for (const std::string& name : required) {
      if (std::find(names.begin(), names.end(), name) != names.end()) continue;
      if (!extra) {
        return Error(path + "/required",
                     absl::StrCat("'", name, "' is required but no member may have that name"));
      }
      members.push_back({name, *extra, true});
      names.push_back(name);
    }
    ASSIGN_OR_RETURN(int64_t min_members, Count(s, "minProperties", path, 0));
    if (min_members > 1) {
      // Free names could repeat, and a repeated name is one member.
      return Error(path, "'minProperties' above 1 is not supported");
    }
    ASSIGN_OR_RETURN(int64_t max_members, Count(s, "maxProperties", path, -1));
    if ((s.contains("minProperties") || s.contains("maxProperties")) && listed) {
      return Error(path,
                   "'minProperties'/'maxProperties' beside listed properties is not supported");
    }
    std::optional<GrammarElement> key;  // of additional members
    if (s.contains("propertyNames")) {
      if (listed) return Error(path, "'propertyNames' beside listed properties is not supported");
      const Json& pn = s["propertyNames"];
      if (pn.is_boolean() && !pn.get<bool>()) {
        extra.reset();
      } else {
        const SchemaResolver resolve = [this](const std::string& ref) { return Lookup(ref); };
        absl::StatusOr<Json> names_schema = IntersectSchemas(pn, Json{{"type", "string"}}, resolve);
        if (!names_schema.ok())
          return Error(path + "/propertyNames", names_schema.status().message());
        if (names_schema->is_boolean()) return Error(path + "/propertyNames", "allows no name");
        ASSIGN_OR_RETURN(GrammarElement k, Schema(*names_schema, path + "/propertyNames"));
        key = k;
      }
    }
    if (min_members > 0 && !extra) return Error(path, "minProperties cannot be met");
    const GrammarElement ws = Grammar::Ref(Ws());
    auto member_seq = [&](const Member& m) {
      GrammarSequence seq = Grammar::Literal(Json(m.name).dump());
      seq.push_back(Grammar::Byte(':'));
      seq.push_back(ws);
      seq.push_back(m.value);
      return seq;
    };
    // first_i: members i.. with none written yet; rest_i: with some written (so a comma first).
    const size_t n = members.size();
    std::vector<int32_t> first(n + 1), rest(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      first[i] = g_.NewRule("members");
      rest[i] = g_.NewRule("members");
    }
    if (extra) {
      GrammarSequence one{key ? *key : OtherKey(names), Grammar::Byte(':'), ws, *extra};
      const int32_t extra_member = g_.NewRule("extra-member");
      g_.AddAlternative(extra_member, one);
      GrammarElement more;
      // After the first: min - 1 .. max - 1 more (these bounds hold only with no listed members).
      RETURN_IF_ERROR(g_.Repeat({Grammar::Byte(','), ws, Grammar::Ref(extra_member)},
                                std::max<int64_t>(0, min_members - 1),
                                max_members < 0 ? -1 : std::max<int64_t>(0, max_members - 1),
                                more));
      if (min_members == 0) g_.AddAlternative(first[n], {});
      if (max_members != 0) g_.AddAlternative(first[n], {Grammar::Ref(extra_member), more});
      g_.AddAlternative(rest[n], {more});
    } else {
      g_.AddAlternative(first[n], {});
      g_.AddAlternative(rest[n], {});
    }
    for (size_t i = n; i-- > 0;) {
      GrammarSequence with_first = member_seq(members[i]);
      with_first.push_back(Grammar::Ref(rest[i + 1]));
      g_.AddAlternative(first[i], with_first);
      GrammarSequence with_rest{Grammar::Byte(','), ws};
      GrammarSequence m = member_seq(members[i]);
      with_rest.insert(with_rest.end(), m.begin(), m.end());
      with_rest.push_back(Grammar::Ref(rest[i + 1]));
      g_.AddAlternative(rest[i], with_rest);
      if (!members[i].required) {
        g_.AddAlternative(first[i], {Grammar::Ref(first[i + 1])});
        g_.AddAlternative(rest[i], {Grammar::Ref(rest[i + 1])});
      }
    }
    const int32_t r = g_.NewRule("object");
    g_.AddAlternative(r, {Grammar::Byte('{'), Grammar::Ref(first[0]), Grammar::Byte('}')});
    return Grammar::Ref(r);
  }

  absl::StatusOr<GrammarElement> ArraySchema(const Json& s, const std::string& path) {
    ASSIGN_OR_RETURN(int64_t min, Count(s, "minItems", path, 0));
    ASSIGN_OR_RETURN(int64_t max, Count(s, "maxItems", path, -1));
    if (max >= 0 && max < min) return Error(path, "maxItems is below minItems");
    std::vector<GrammarElement> prefix;
    if (s.contains("prefixItems")) {
      const Json& p = s["prefixItems"];
      if (!p.is_array()) return Error(path + "/prefixItems", "must be an array of schemas");
      for (size_t i = 0; i < p.size(); ++i) {
        ASSIGN_OR_RETURN(GrammarElement e, Schema(p[i], absl::StrCat(path, "/prefixItems/", i)));
        prefix.push_back(e);
      }
    }
    // Here (no applicator beside it) unevaluatedItems means what items does.
    const char* items_key =
        !s.contains("items") && s.contains("unevaluatedItems") ? "unevaluatedItems" : "items";
    std::optional<GrammarElement> items = Grammar::Ref(Value());
    if (s.contains(items_key)) {
      if (s[items_key].is_boolean() && !s[items_key].get<bool>()) {
        items.reset();
      } else {
        ASSIGN_OR_RETURN(GrammarElement e,
                         Schema(s[items_key], absl::StrCat(path, "/", items_key)));
        items = e;
      }
    }
    // contains: the first minContains items (1 by default) are written to match it.
    ASSIGN_OR_RETURN(int64_t min_contains, Count(s, "minContains", path, 1));
    if (s.contains("contains") && min_contains > 0) {
      if (!prefix.empty()) return Error(path, "'contains' beside 'prefixItems' is not supported");
      const SchemaResolver resolve = [this](const std::string& ref) { return Lookup(ref); };
      absl::StatusOr<Json> c = IntersectSchemas(s.contains(items_key) ? s[items_key] : Json(true),
                                                s["contains"], resolve);
      if (!c.ok()) return Error(path + "/contains", c.status().message());
      if (c->is_boolean() && !c->get<bool>()) return Error(path + "/contains", "no item can match");
      ASSIGN_OR_RETURN(GrammarElement e, Schema(*c, path + "/contains"));
      if (max >= 0 && max < min_contains) return Error(path, "maxItems is below minContains");
      for (int64_t i = 0; i < min_contains; ++i) prefix.push_back(e);
      min = std::max(min, min_contains);
    }
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (!items) max = max < 0 ? k : std::min(max, k);
    if (max >= 0 && max < min) return Error(path, "minItems cannot be met");
    const GrammarElement ws = Grammar::Ref(Ws());
    // after_i: the rest of the array once i items are written.
    const int64_t listed = max < 0 ? k : std::min(max, k);
    std::vector<int32_t> after(static_cast<size_t>(listed) + 1);
    for (auto& r : after) r = g_.NewRule("items");
    {
      // Past the prefix: `items` repeated up to the bounds left.
      GrammarSequence tail;
      const int64_t done = listed;
      if (items && (max < 0 || max > done)) {
        const int64_t lo = std::max<int64_t>(0, min - done);
        const int64_t hi = max < 0 ? -1 : max - done;
        GrammarElement more;
        if (done == 0) {
          // The first item has no comma before it.
          GrammarElement rest;
          RETURN_IF_ERROR(g_.Repeat({Grammar::Byte(','), ws, *items}, std::max<int64_t>(0, lo - 1),
                                    hi < 0 ? -1 : hi - 1, rest));
          const int32_t some = g_.NewRule("items");
          g_.AddAlternative(some, {*items, rest});
          if (lo == 0) g_.AddAlternative(some, {});
          tail.push_back(Grammar::Ref(some));
        } else {
          RETURN_IF_ERROR(g_.Repeat({Grammar::Byte(','), ws, *items}, lo, hi, more));
          tail.push_back(more);
        }
      }
      tail.push_back(Grammar::Byte(']'));
      g_.AddAlternative(after[listed], tail);
    }
    for (int64_t i = listed; i-- > 0;) {
      if (i >= min) g_.AddAlternative(after[i], {Grammar::Byte(']')});
      GrammarSequence seq;
      if (i > 0) seq = {Grammar::Byte(','), ws};
      seq.push_back(prefix[i]);
      seq.push_back(Grammar::Ref(after[i + 1]));
      g_.AddAlternative(after[i], seq);
    }
    const int32_t r = g_.NewRule("array");
    g_.AddAlternative(r, {Grammar::Byte('['), Grammar::Ref(after[0])});
    return Grammar::Ref(r);
  }

  absl::StatusOr<GrammarElement> Ref(const Json& ref, const std::string& path) {
    if (!ref.is_string()) return Error(path, "must be a string");
    const std::string target = ref.get<std::string>();
    absl::StatusOr<const Json*> found = Lookup(target);
    if (!found.ok()) return Error(path, found.status().message());
    if (auto it = refs_.find(target); it != refs_.end()) return Grammar::Ref(it->second);
    if (refs_.size() >= kMaxRefs) {
      return Error(path, absl::StrCat("more than ", kMaxRefs, " distinct references"));
    }
    const int32_t r = g_.NewRule("ref");
    refs_[target] = r;  // before compiling the target, so recursion finds it
    ASSIGN_OR_RETURN(GrammarElement e, Schema(**found, target.substr(1)));
    g_.AddAlternative(r, {e});
    return Grammar::Ref(r);
  }

  const Json* root_;
  Grammar& g_;
  int depth_ = 0;
  int32_t ws_ = -1, string_char_ = -1, string_ = -1, integer_ = -1, number_ = -1, value_ = -1,
          object_ = -1;
  std::map<std::string, int32_t> refs_;
};

absl::StatusOr<Grammar> RootedGrammar(
    const std::function<absl::StatusOr<GrammarElement>(Grammar&)>& body) {
  Grammar g;
  const int32_t root = g.Rule("root");
  g.Define(root);
  g.SetRoot(root);
  ASSIGN_OR_RETURN(GrammarElement e, body(g));
  g.AddAlternative(root, {e});
  absl::Status s = g.Check();
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("json_schema: ", s.message()));
  return g;
}

}  // namespace

absl::StatusOr<GrammarElement> AddJsonSchema(Grammar& grammar, absl::string_view schema_json) {
  if (CheckJsonShape(std::string(schema_json), kMaxSchemaDepth, INT64_MAX) == JsonShape::kTooDeep) {
    return absl::InvalidArgumentError(
        absl::StrCat("json_schema: nested deeper than ", kMaxSchemaDepth, " levels"));
  }
  Json schema = Json::parse(schema_json.begin(), schema_json.end(), nullptr, false);
  if (schema.is_discarded()) return absl::InvalidArgumentError("json_schema: not valid JSON");
  return SchemaCompiler(grammar, &schema).Compile();
}

absl::StatusOr<Grammar> JsonSchemaGrammar(absl::string_view schema_json) {
  return RootedGrammar([&](Grammar& g) { return AddJsonSchema(g, schema_json); });
}

absl::StatusOr<Grammar> JsonObjectGrammar() {
  return RootedGrammar([](Grammar& g) { return SchemaCompiler(g, nullptr).Compile(); });
}

}  // namespace walsh
