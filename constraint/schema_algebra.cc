#include "constraint/schema_algebra.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace walsh {
namespace {

using Json = SchemaJson;
constexpr int kMaxDepth = 32;
constexpr size_t kMaxBranches = 64;
// Steps (intersections, flattenings, checks) one call may take: anyOf against anyOf through
// references multiplies, and this bounds it.
constexpr int64_t kMaxSteps = 2048;

absl::Status OverBudget() {
  return absl::InvalidArgumentError(
      absl::StrCat("combining these schemas takes more than ", kMaxSteps, " steps"));
}

absl::Status CannotCombine(const std::string& key) {
  return absl::InvalidArgumentError(absl::StrCat(
      "two different '", key, "' cannot be combined (allOf, or beside $ref or anyOf)"));
}

absl::StatusOr<Json> IntersectSchemas(const Json& a, const Json& b, const SchemaResolver& resolve,
                                      int depth, int64_t& budget);

absl::StatusOr<Json> Flatten(const Json& s, const SchemaResolver& resolve, int depth,
                             int64_t& budget) {
  if (--budget < 0) return OverBudget();
  if (depth > kMaxDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("references or allOf nested more than ", kMaxDepth, " deep to combine"));
  }
  if (!s.is_object()) return s;
  Json out = s;
  if (out.contains("$ref")) {
    if (!out["$ref"].is_string()) return absl::InvalidArgumentError("'$ref' must be a string");
    ASSIGN_OR_RETURN(const Json* target, resolve(out["$ref"].get<std::string>()));
    out.erase("$ref");
    ASSIGN_OR_RETURN(Json flat, Flatten(*target, resolve, depth + 1, budget));
    ASSIGN_OR_RETURN(out, IntersectSchemas(flat, out, resolve, depth + 1, budget));
  }
  if (out.is_object() && out.contains("allOf")) {
    const Json all = out["allOf"];
    if (!all.is_array() || all.empty()) {
      return absl::InvalidArgumentError("'allOf' must be a non-empty array");
    }
    out.erase("allOf");
    // The branches first, what sits beside them last: members keep the branches' order.
    Json folded = true;
    for (const Json& branch : all) {
      ASSIGN_OR_RETURN(folded, IntersectSchemas(folded, branch, resolve, depth + 1, budget));
    }
    ASSIGN_OR_RETURN(out, IntersectSchemas(folded, out, resolve, depth + 1, budget));
  }
  return out;
}

std::vector<std::string> Types(const Json& s) {
  if (!s.contains("type")) return {};
  if (s["type"].is_string()) return {s["type"].get<std::string>()};
  std::vector<std::string> out;
  for (const Json& t : s["type"]) {
    if (t.is_string()) out.push_back(t.get<std::string>());
  }
  return out;
}

// unevaluated* of one schema, before it is merged with another: with no applicator beside
// them they mean what additionalProperties and items do; merged, they would wrongly see the
// other schema's members as evaluated.
absl::Status Localize(Json& s) {
  const bool applicators =
      s.contains("anyOf") || s.contains("oneOf") || s.contains("if") || s.contains("contains");
  for (auto [uneval, local] : {std::pair{"unevaluatedProperties", "additionalProperties"},
                               std::pair{"unevaluatedItems", "items"}}) {
    if (!s.contains(uneval)) continue;
    if (applicators) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", uneval, "' beside an applicator cannot be combined"));
    }
    if (!s.contains(local)) s[local] = s[uneval];
    s.erase(uneval);
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> IntersectSchemas(const Json& a_in, const Json& b_in,
                                      const SchemaResolver& resolve, int depth, int64_t& budget) {
  if (--budget < 0) return OverBudget();
  if (depth > kMaxDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("schemas nested more than ", kMaxDepth, " deep to combine"));
  }
  if (a_in.is_boolean()) return a_in.get<bool>() ? b_in : Json(false);
  if (b_in.is_boolean()) return b_in.get<bool>() ? a_in : Json(false);
  if (a_in == b_in) return a_in;
  if (!a_in.is_object() || !b_in.is_object()) {
    return absl::InvalidArgumentError("a schema must be an object or a boolean");
  }
  ASSIGN_OR_RETURN(Json a, Flatten(a_in, resolve, depth + 1, budget));
  ASSIGN_OR_RETURN(Json b, Flatten(b_in, resolve, depth + 1, budget));
  if (a.is_boolean() || b.is_boolean()) return IntersectSchemas(a, b, resolve, depth + 1, budget);
  RETURN_IF_ERROR(Localize(a));
  RETURN_IF_ERROR(Localize(b));
  Json out = a;
  for (const auto& [key, vb] : b.items()) {
    if (key == "properties" || key == "additionalProperties" || key == "items" ||
        key == "prefixItems") {
      continue;  // below, together
    }
    if (!out.contains(key)) {
      out[key] = vb;
      continue;
    }
    const Json va = out[key];
    if (IsSchemaAnnotation(key) || SameJsonValue(va, vb)) continue;
    if (key == "type") {
      std::vector<std::string> both;
      for (const std::string& x : Types(a)) {
        for (const std::string& y : Types(b)) {
          if (x == y || (x == "number" && y == "integer")) both.push_back(y);
          if (x == "integer" && y == "number") both.push_back(x);
        }
      }
      if (both.empty()) return Json(false);
      out["type"] = Json(both);
    } else if (key == "required") {
      std::vector<std::string> names = va.get<std::vector<std::string>>();
      for (const Json& n : vb) {
        if (std::find(names.begin(), names.end(), n.get<std::string>()) == names.end()) {
          names.push_back(n.get<std::string>());
        }
      }
      out["required"] = Json(names);
    } else if (key == "minLength" || key == "minItems" || key == "minimum" ||
               key == "exclusiveMinimum" || key == "minProperties" || key == "minContains") {
      out[key] = va.get<double>() >= vb.get<double>() ? va : vb;
    } else if (key == "maxLength" || key == "maxItems" || key == "maximum" ||
               key == "exclusiveMaximum" || key == "maxProperties" || key == "maxContains") {
      out[key] = va.get<double>() <= vb.get<double>() ? va : vb;
    } else if (key == "enum" || key == "const") {
      Json values = Json::array();
      const Json xs = key == "const" ? Json::array({va}) : va;
      const Json ys = key == "const" ? Json::array({vb}) : vb;
      for (const Json& x : xs) {
        for (const Json& y : ys) {
          if (SameJsonValue(x, y)) values.push_back(x);
        }
      }
      if (values.empty()) return Json(false);
      out.erase("const");
      out["enum"] = values;
    } else if (key == "anyOf" || key == "oneOf") {
      Json branches = Json::array();
      for (const Json& x : va) {
        for (const Json& y : vb) {
          ASSIGN_OR_RETURN(Json both, IntersectSchemas(x, y, resolve, depth + 1, budget));
          if (!(both.is_boolean() && !both.get<bool>())) branches.push_back(both);
          if (branches.size() > kMaxBranches) {
            return absl::InvalidArgumentError(
                absl::StrCat("combining '", key, "' gives more than ", kMaxBranches, " branches"));
          }
        }
      }
      if (branches.empty()) return Json(false);
      out[key] = branches;
    } else {
      return CannotCombine(key);
    }
  }
  // A const beside an enum: one enum.
  if (out.contains("const") && out.contains("enum")) {
    Json kept = Json::array();
    for (const Json& v : out["enum"]) {
      if (SameJsonValue(v, out["const"])) kept.push_back(v);
    }
    if (kept.empty()) return Json(false);
    out.erase("const");
    out["enum"] = kept;
  }
  // Members: a name one side lists and the other does not meets the other's
  // additionalProperties.
  if (a.contains("properties") || b.contains("properties") || a.contains("additionalProperties") ||
      b.contains("additionalProperties")) {
    const Json none = Json::object();
    const Json& pa = a.contains("properties") ? a["properties"] : none;
    const Json& pb = b.contains("properties") ? b["properties"] : none;
    const Json adda = a.contains("additionalProperties") ? a["additionalProperties"] : Json(true);
    const Json addb = b.contains("additionalProperties") ? b["additionalProperties"] : Json(true);
    if (!pa.is_object() || !pb.is_object()) {
      return absl::InvalidArgumentError("'properties' must be an object");
    }
    Json props = Json::object();
    for (const Json* side : {&pa, &pb}) {
      for (const auto& [name, unused] : side->items()) {
        if (props.contains(name)) continue;
        const Json sa = pa.contains(name) ? pa[name] : adda;
        const Json sb = pb.contains(name) ? pb[name] : addb;
        ASSIGN_OR_RETURN(props[name], IntersectSchemas(sa, sb, resolve, depth + 1, budget));
      }
    }
    if (!props.empty()) out["properties"] = props;
    if (a.contains("additionalProperties") || b.contains("additionalProperties")) {
      ASSIGN_OR_RETURN(out["additionalProperties"],
                       IntersectSchemas(adda, addb, resolve, depth + 1, budget));
    }
  }
  // Items: position by position, then what follows the longer prefix.
  if (a.contains("items") || b.contains("items") || a.contains("prefixItems") ||
      b.contains("prefixItems")) {
    const Json none = Json::array();
    const Json& xa = a.contains("prefixItems") ? a["prefixItems"] : none;
    const Json& xb = b.contains("prefixItems") ? b["prefixItems"] : none;
    const Json ia = a.contains("items") ? a["items"] : Json(true);
    const Json ib = b.contains("items") ? b["items"] : Json(true);
    if (!xa.is_array() || !xb.is_array()) {
      return absl::InvalidArgumentError("'prefixItems' must be an array");
    }
    Json prefix = Json::array();
    for (size_t i = 0; i < std::max(xa.size(), xb.size()); ++i) {
      ASSIGN_OR_RETURN(Json both,
                       IntersectSchemas(i < xa.size() ? xa[i] : ia, i < xb.size() ? xb[i] : ib,
                                        resolve, depth + 1, budget));
      prefix.push_back(both);
    }
    if (!prefix.empty()) out["prefixItems"] = prefix;
    if (a.contains("items") || b.contains("items")) {
      ASSIGN_OR_RETURN(out["items"], IntersectSchemas(ia, ib, resolve, depth + 1, budget));
    }
  }
  return out;
}

int64_t Codepoints(const std::string& s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

absl::StatusOr<bool> Admits(const Json& s, const Json& v, const SchemaResolver& resolve, int depth,
                            int64_t& budget) {
  if (--budget < 0) return OverBudget();
  if (depth > kMaxDepth) {
    return absl::InvalidArgumentError("schemas nested too deep to check enum values against");
  }
  if (s.is_boolean()) return s.get<bool>();
  if (!s.is_object()) return absl::InvalidArgumentError("a schema must be an object or a boolean");
  for (const auto& [key, k] : s.items()) {
    if (IsSchemaAnnotation(key)) continue;
    bool ok = true;
    if (key == "type") {
      ok = false;
      for (const std::string& t : Types(s)) {
        ok = ok || (t == "string" && v.is_string()) || (t == "boolean" && v.is_boolean()) ||
             (t == "null" && v.is_null()) || (t == "object" && v.is_object()) ||
             (t == "array" && v.is_array()) || (t == "number" && v.is_number()) ||
             (t == "integer" && v.is_number() && std::floor(v.get<double>()) == v.get<double>());
      }
    } else if (key == "enum" || key == "const") {
      ok = false;
      for (const Json& x : key == "const" ? Json::array({k}) : k) ok = ok || SameJsonValue(x, v);
    } else if (key == "minimum") {
      ok = !v.is_number() || v.get<double>() >= k.get<double>();
    } else if (key == "maximum") {
      ok = !v.is_number() || v.get<double>() <= k.get<double>();
    } else if (key == "exclusiveMinimum") {
      ok = !v.is_number() || v.get<double>() > k.get<double>();
    } else if (key == "exclusiveMaximum") {
      ok = !v.is_number() || v.get<double>() < k.get<double>();
    } else if (key == "minLength") {
      ok = !v.is_string() || Codepoints(v.get<std::string>()) >= k.get<int64_t>();
    } else if (key == "maxLength") {
      ok = !v.is_string() || Codepoints(v.get<std::string>()) <= k.get<int64_t>();
    } else if (key == "minItems") {
      ok = !v.is_array() || static_cast<int64_t>(v.size()) >= k.get<int64_t>();
    } else if (key == "maxItems") {
      ok = !v.is_array() || static_cast<int64_t>(v.size()) <= k.get<int64_t>();
    } else if (key == "required") {
      for (const Json& n : k) ok = ok && (!v.is_object() || v.contains(n.get<std::string>()));
    } else if (key == "properties" || key == "additionalProperties") {
      if (!v.is_object() || (key == "additionalProperties" && s.contains("properties"))) continue;
      const Json none = Json::object();
      const Json& props = s.contains("properties") ? s["properties"] : none;
      for (const auto& [name, member] : v.items()) {
        const Json* sub = props.contains(name)                 ? &props[name]
                          : s.contains("additionalProperties") ? &s["additionalProperties"]
                                                               : nullptr;
        if (sub == nullptr) continue;
        ASSIGN_OR_RETURN(bool m, Admits(*sub, member, resolve, depth + 1, budget));
        ok = ok && m;
      }
    } else if (key == "items" || key == "prefixItems") {
      if (!v.is_array() || (key == "items" && s.contains("prefixItems"))) continue;
      const size_t listed = s.contains("prefixItems") ? s["prefixItems"].size() : 0;
      for (size_t i = 0; i < v.size(); ++i) {
        const Json* sub = i < listed            ? &s["prefixItems"][i]
                          : s.contains("items") ? &s["items"]
                                                : nullptr;
        if (sub == nullptr) continue;
        ASSIGN_OR_RETURN(bool m, Admits(*sub, v[i], resolve, depth + 1, budget));
        ok = ok && m;
      }
    } else if (key == "anyOf" || key == "oneOf" || key == "allOf") {
      size_t matched = 0;
      for (const Json& branch : k) {
        ASSIGN_OR_RETURN(bool m, Admits(branch, v, resolve, depth + 1, budget));
        matched += m;
      }
      ok = key == "anyOf" ? matched > 0 : key == "oneOf" ? matched == 1 : matched == k.size();
    } else if (key == "$ref") {
      ASSIGN_OR_RETURN(const Json* target, resolve(k.get<std::string>()));
      ASSIGN_OR_RETURN(ok, Admits(*target, v, resolve, depth + 1, budget));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("enum or const values cannot be checked against '", key, "'"));
    }
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool SameJsonValue(const SchemaJson& a, const SchemaJson& b) {
  return nlohmann::json::parse(a.dump()) == nlohmann::json::parse(b.dump());
}

bool IsSchemaAnnotation(const std::string& k) {
  static const auto* s = new std::set<std::string>{
      "title",    "description", "default",  "examples",  "$schema", "$id",
      "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
  return s->count(k) > 0;
}

absl::StatusOr<SchemaJson> IntersectSchemas(const SchemaJson& a, const SchemaJson& b,
                                            const SchemaResolver& resolve) {
  try {
    int64_t budget = kMaxSteps;
    return IntersectSchemas(a, b, resolve, 0, budget);
  } catch (const std::exception& e) {  // a keyword of the wrong JSON type
    return absl::InvalidArgumentError(absl::StrCat("a keyword of the wrong type: ", e.what()));
  }
}

absl::StatusOr<SchemaJson> FlattenSchema(const SchemaJson& s, const SchemaResolver& resolve) {
  try {
    int64_t budget = kMaxSteps;
    return Flatten(s, resolve, 0, budget);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("a keyword of the wrong type: ", e.what()));
  }
}

absl::StatusOr<bool> SchemaAdmits(const SchemaJson& schema, const SchemaJson& value,
                                  const SchemaResolver& resolve) {
  try {
    int64_t budget = kMaxSteps;
    return Admits(schema, value, resolve, 0, budget);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("a keyword of the wrong type: ", e.what()));
  }
}

}  // namespace walsh
