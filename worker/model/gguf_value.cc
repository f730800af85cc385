#include "worker/model/gguf_value.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace walsh {

const char* GgufTypeName(GgufType t) {
  static constexpr const char* kNames[kGgufTypeCount] = {
      "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
      "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
  const auto i = static_cast<uint32_t>(t);
  return i < kGgufTypeCount ? kNames[i] : "INVALID";
}

bool IsGgufIntegerType(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

size_t GgufScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

GgufValue GgufValue::Uint(GgufType t, uint64_t v) {
  GgufValue out;
  out.type_ = t;
  out.u_ = v;
  return out;
}

GgufValue GgufValue::Int(GgufType t, int64_t v) {
  GgufValue out;
  out.type_ = t;
  out.u_ = static_cast<uint64_t>(v);
  return out;
}

GgufValue GgufValue::Float(GgufType t, double v) {
  GgufValue out;
  out.type_ = t;
  out.f_ = v;
  return out;
}

GgufValue GgufValue::String(std::string v) {
  GgufValue out;
  out.type_ = GgufType::kString;
  out.str_ = std::move(v);
  return out;
}

GgufValue GgufValue::Array(GgufType elem_type, std::vector<GgufValue> elems) {
  GgufValue out;
  out.type_ = GgufType::kArray;
  out.elem_type_ = elem_type;
  out.elems_ = std::move(elems);
  return out;
}

GgufValue GgufValue::I32Array(const std::vector<int32_t>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (int32_t x : v) elems.push_back(I32(x));
  return Array(GgufType::kInt32, std::move(elems));
}

GgufValue GgufValue::StringArray(const std::vector<std::string>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (const std::string& s : v) elems.push_back(String(s));
  return Array(GgufType::kString, std::move(elems));
}

absl::StatusOr<int64_t> GgufValue::AsInt64() const {
  switch (type_) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
      return static_cast<int64_t>(u_);
    case GgufType::kUint64:
      if (u_ > static_cast<uint64_t>(INT64_MAX)) {
        return absl::OutOfRangeError(absl::StrCat("value ", u_, " does not fit in int64"));
      }
      return static_cast<int64_t>(u_);
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      return raw_int();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("has type ", GgufTypeName(type_), ", expected an integer"));
  }
}

std::string GgufValue::DebugString(size_t max_elems) const {
  switch (type_) {
    case GgufType::kString:
      return absl::StrCat("\"", str_, "\"");
    case GgufType::kBool:
      return u_ ? "true" : "false";
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return absl::StrCat(f_);
    case GgufType::kArray: {
      std::string out = absl::StrCat(GgufTypeName(elem_type_), "[", elems_.size(), "] [");
      for (size_t i = 0; i < elems_.size() && i < max_elems; ++i) {
        absl::StrAppend(&out, i ? ", " : "", elems_[i].DebugString(max_elems));
      }
      absl::StrAppend(&out, elems_.size() > max_elems ? ", ...]" : "]");
      return out;
    }
    default: {
      auto v = AsInt64();
      return v.ok() ? absl::StrCat(*v) : absl::StrCat(u_);
    }
  }
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type_ != o.type_) return false;
  switch (type_) {
    case GgufType::kString:
      return str_ == o.str_;
    case GgufType::kArray:
      return elem_type_ == o.elem_type_ && elems_ == o.elems_;
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return f_ == o.f_ || (f_ != f_ && o.f_ != o.f_);
    default:
      return u_ == o.u_;
  }
}

}  // namespace walsh
