// One GGUF metadata value of any of the 13 value types, arrays (also nested) included.
#ifndef WALSH_WORKER_MODEL_GGUF_VALUE_H_
#define WALSH_WORKER_MODEL_GGUF_VALUE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace walsh {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

inline constexpr uint32_t kGgufTypeCount = 13;

const char* GgufTypeName(GgufType t);
bool IsGgufIntegerType(GgufType t);
// Encoded size of a scalar of type t; 0 for strings and arrays.
size_t GgufScalarSize(GgufType t);

class GgufValue {
 public:
  GgufValue() = default;

  static GgufValue Uint(GgufType t, uint64_t v);  // t: an unsigned integer type or kBool
  static GgufValue Int(GgufType t, int64_t v);    // t: a signed integer type
  static GgufValue Float(GgufType t, double v);   // t: kFloat32 or kFloat64
  static GgufValue U32(uint32_t v) { return Uint(GgufType::kUint32, v); }
  static GgufValue I32(int32_t v) { return Int(GgufType::kInt32, v); }
  static GgufValue F32(float v) { return Float(GgufType::kFloat32, v); }
  static GgufValue Bool(bool v) { return Uint(GgufType::kBool, v ? 1 : 0); }
  static GgufValue String(std::string v);
  static GgufValue Array(GgufType elem_type, std::vector<GgufValue> elems);
  static GgufValue I32Array(const std::vector<int32_t>& v);
  static GgufValue StringArray(const std::vector<std::string>& v);

  GgufType type() const { return type_; }
  GgufType elem_type() const { return elem_type_; }  // meaningful for arrays only
  bool is_integer() const { return IsGgufIntegerType(type_); }

  // Raw payloads; each is meaningful only for the matching type family.
  uint64_t raw_uint() const { return u_; }
  int64_t raw_int() const { return static_cast<int64_t>(u_); }
  double raw_float() const { return f_; }
  const std::string& str() const { return str_; }
  const std::vector<GgufValue>& elems() const { return elems_; }

  // Integer value of any integer type, if it fits in int64.
  absl::StatusOr<int64_t> AsInt64() const;

  // Human-readable rendering; long arrays are abbreviated.
  std::string DebugString(size_t max_elems = 8) const;

  bool operator==(const GgufValue& o) const;

 private:
  GgufType type_ = GgufType::kUint8;
  GgufType elem_type_ = GgufType::kUint8;
  uint64_t u_ = 0;
  double f_ = 0;
  std::string str_;
  std::vector<GgufValue> elems_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_GGUF_VALUE_H_
