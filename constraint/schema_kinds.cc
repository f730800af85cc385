#include "constraint/schema_kinds.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

absl::Status Error(const std::string& path, absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("json_schema: at ", path.empty() ? "/" : path, ": ", message));
}

}  // namespace

// The JSON kinds of value a schema may accept (nullopt: any), and those this compiler writes
// for it (its inferred type where it has none). "integer" counts as "number".
std::optional<std::set<std::string>> SchemaKinds(const SchemaJson& b, bool written) {
  if (b.is_boolean()) {
    if (b.get<bool>()) return std::nullopt;
    return std::set<std::string>{};
  }
  if (!b.is_object()) return std::nullopt;
  auto kind = [](const SchemaJson& v) -> std::string {
    return v.is_object()    ? "object"
           : v.is_array()   ? "array"
           : v.is_string()  ? "string"
           : v.is_number()  ? "number"
           : v.is_boolean() ? "boolean"
                            : "null";
  };
  std::set<std::string> out;
  if (b.contains("const")) {
    out.insert(kind(b["const"]));
    return out;
  }
  if (b.contains("enum") && b["enum"].is_array()) {
    for (const SchemaJson& v : b["enum"]) out.insert(kind(v));
    return out;
  }
  if (b.contains("type")) {
    const SchemaJson t = b["type"].is_array() ? b["type"] : SchemaJson::array({b["type"]});
    for (const SchemaJson& x : t) {
      if (!x.is_string()) return std::nullopt;
      out.insert(x.get<std::string>() == "integer" ? "number" : x.get<std::string>());
    }
    return out;
  }
  if (!written || b.contains("$ref") || b.contains("anyOf") || b.contains("oneOf") ||
      b.contains("allOf")) {
    return std::nullopt;
  }
  if (b.contains("properties") || b.contains("required") || b.contains("additionalProperties")) {
    return std::set<std::string>{"object"};
  }
  if (b.contains("items") || b.contains("prefixItems")) return std::set<std::string>{"array"};
  return std::nullopt;
}

// oneOf holds when exactly one branch does: each branch's outputs must fail every other
// branch, which is shown here by the kinds of value (or the enum values) alone.
absl::Status CheckOneOfDisjoint(const SchemaJson& branches, const std::string& at) {
  for (size_t i = 0; i < branches.size(); ++i) {
    for (size_t j = 0; j < branches.size(); ++j) {
      if (i == j) continue;
      const auto written = SchemaKinds(branches[i], true);
      const auto accepted = SchemaKinds(branches[j], false);
      bool disjoint = false;
      if (written && written->empty()) disjoint = true;
      if (accepted && accepted->empty()) disjoint = true;
      if (written && accepted) {
        disjoint =
            disjoint || std::none_of(written->begin(), written->end(),
                                     [&](const std::string& k) { return accepted->count(k); });
      }
      const SchemaJson& x = branches[i];
      const SchemaJson& y = branches[j];
      auto values = [](const SchemaJson& b) -> std::optional<SchemaJson> {
        if (!b.is_object() || b.size() != 1) return std::nullopt;
        if (b.contains("const")) return SchemaJson::array({b["const"]});
        if (b.contains("enum") && b["enum"].is_array()) return b["enum"];
        return std::nullopt;
      };
      if (auto vx = values(x), vy = values(y); vx && vy) {
        bool shared = false;
        for (const SchemaJson& a : *vx) {
          for (const SchemaJson& b : *vy) {
            shared = shared || SameJsonValue(a, b);
          }
        }
        disjoint = disjoint || !shared;
      }
      if (!disjoint) {
        return Error(at, absl::StrCat("branches ", i, " and ", j,
                                      " may hold for the same value; oneOf is supported only "
                                      "where its branches differ in kind or enum values"));
      }
    }
  }
  return absl::OkStatus();
}

// `s` without the values `not` accepts, where `not` names types alone.
absl::StatusOr<SchemaJson> WithoutTypes(SchemaJson s, const SchemaJson& negated,
                                        const std::string& path) {
  if (negated.is_boolean()) {
    if (!negated.get<bool>()) return s;
    return Error(path, "'not: true' accepts no value");
  }
  std::optional<std::set<std::string>> gone;
  if (negated.is_object()) {
    bool only_type = negated.contains("type");
    for (const auto& [k, v] : negated.items())
      only_type = only_type && (k == "type" || IsSchemaAnnotation(k));
    if (only_type) gone = SchemaKinds(negated, false);
    if (negated.empty()) return Error(path, "'not: {}' accepts no value");
  }
  if (!gone) return Error(path, "'not' is supported only around 'type'");
  // "integer" was folded into "number" by Kinds: keep what is left of the rest's types.
  std::vector<std::string> all = {"null",   "boolean", "object", "array",
                                  "string", "number",  "integer"};
  std::vector<std::string> kept;
  std::vector<std::string> have = all;
  if (s.contains("type")) {
    have.clear();
    const SchemaJson t = s["type"].is_array() ? s["type"] : SchemaJson::array({s["type"]});
    for (const SchemaJson& x : t) {
      if (x.is_string()) have.push_back(x.get<std::string>());
    }
  }
  const bool not_integer_only =
      negated["type"] == "integer" || (negated["type"].is_array() && negated["type"].size() == 1 &&
                                       negated["type"][0] == "integer");
  for (const std::string& t : have) {
    const std::string kind = t == "integer" ? "number" : t;
    if (!gone->count(kind)) {
      kept.push_back(t);
    } else if (t == "number" && not_integer_only) {
      return Error(path, "'not' an integer among numbers is not supported");
    }
  }
  if (!s.contains("type")) {
    kept.erase(std::remove(kept.begin(), kept.end(), "integer"), kept.end());
  }
  if (kept.empty()) return Error(path, "no type is left beside 'not'");
  s["type"] = SchemaJson(kept);
  return s;
}

}  // namespace walsh
