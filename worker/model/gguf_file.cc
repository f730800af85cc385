#include "worker/model/gguf_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_keys.h"

namespace walsh {
namespace {

constexpr int kMaxArrayNesting = 8;
// Caps the metadata's total array elements (a real vocabulary has ~250k tokens and as many
// merges), so a lying count cannot make the parser allocate without bound.
constexpr uint64_t kMaxMetadataElements = uint64_t{1} << 24;

// Reads little-endian fields from a byte range; never past its end.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  absl::Status Read(void* out, size_t n, absl::string_view what) {
    if (n > remaining()) {
      return absl::InvalidArgumentError(absl::StrCat("truncated file: ", what, " needs ", n,
                                                     " bytes at offset ", pos_, ", only ",
                                                     remaining(), " remain"));
    }
    std::memcpy(out, data_ + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  template <typename T>
  absl::StatusOr<T> Get(absl::string_view what) {
    T v{};
    RETURN_IF_ERROR(Read(&v, sizeof v, what));
    return v;
  }

  absl::StatusOr<std::string> GetString(absl::string_view what) {
    ASSIGN_OR_RETURN(uint64_t len, Get<uint64_t>(what));
    if (len > remaining()) {
      return absl::InvalidArgumentError(absl::StrCat("truncated file: ", what, " claims ", len,
                                                     " bytes at offset ", pos_, ", only ",
                                                     remaining(), " remain"));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Smallest encoding of one element of type t, to bound array counts before allocating.
size_t MinEncodedSize(GgufType t) {
  if (t == GgufType::kString) return 8;
  if (t == GgufType::kArray) return 12;
  return GgufScalarSize(t);
}

absl::StatusOr<GgufType> ReadType(Cursor& c, absl::string_view what) {
  ASSIGN_OR_RETURN(uint32_t raw, c.Get<uint32_t>(what));
  if (raw >= kGgufTypeCount) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", raw, ", not a GGUF value type"));
  }
  return static_cast<GgufType>(raw);
}

absl::StatusOr<GgufValue> ReadValue(Cursor& c, GgufType type, int depth, uint64_t* budget,
                                    absl::string_view what) {
  switch (type) {
    case GgufType::kUint8: {
      ASSIGN_OR_RETURN(uint8_t v, c.Get<uint8_t>(what));
      return GgufValue::Uint(type, v);
    }
    case GgufType::kInt8: {
      ASSIGN_OR_RETURN(int8_t v, c.Get<int8_t>(what));
      return GgufValue::Int(type, v);
    }
    case GgufType::kUint16: {
      ASSIGN_OR_RETURN(uint16_t v, c.Get<uint16_t>(what));
      return GgufValue::Uint(type, v);
    }
    case GgufType::kInt16: {
      ASSIGN_OR_RETURN(int16_t v, c.Get<int16_t>(what));
      return GgufValue::Int(type, v);
    }
    case GgufType::kUint32: {
      ASSIGN_OR_RETURN(uint32_t v, c.Get<uint32_t>(what));
      return GgufValue::Uint(type, v);
    }
    case GgufType::kInt32: {
      ASSIGN_OR_RETURN(int32_t v, c.Get<int32_t>(what));
      return GgufValue::Int(type, v);
    }
    case GgufType::kUint64: {
      ASSIGN_OR_RETURN(uint64_t v, c.Get<uint64_t>(what));
      return GgufValue::Uint(type, v);
    }
    case GgufType::kInt64: {
      ASSIGN_OR_RETURN(int64_t v, c.Get<int64_t>(what));
      return GgufValue::Int(type, v);
    }
    case GgufType::kFloat32: {
      ASSIGN_OR_RETURN(float v, c.Get<float>(what));
      return GgufValue::Float(type, v);
    }
    case GgufType::kFloat64: {
      ASSIGN_OR_RETURN(double v, c.Get<double>(what));
      return GgufValue::Float(type, v);
    }
    case GgufType::kBool: {
      ASSIGN_OR_RETURN(uint8_t v, c.Get<uint8_t>(what));
      if (v > 1) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": BOOL byte is ", v, ", not 0 or 1"));
      }
      return GgufValue::Bool(v != 0);
    }
    case GgufType::kString: {
      ASSIGN_OR_RETURN(std::string s, c.GetString(what));
      return GgufValue::String(std::move(s));
    }
    case GgufType::kArray: {
      if (depth >= kMaxArrayNesting) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": arrays nested deeper than ", kMaxArrayNesting));
      }
      ASSIGN_OR_RETURN(GgufType elem, ReadType(c, absl::StrCat(what, " element type")));
      ASSIGN_OR_RETURN(uint64_t count, c.Get<uint64_t>(absl::StrCat(what, " element count")));
      if (count > c.remaining() / MinEncodedSize(elem)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "truncated file: ", what, " claims ", count, " elements of ", GgufTypeName(elem),
            ", more than the ", c.remaining(), " remaining bytes can hold"));
      }
      if (count > *budget) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " has ", count, " elements; the metadata may hold ",
                         kMaxMetadataElements, " array elements in all"));
      }
      *budget -= count;
      std::vector<GgufValue> elems;
      elems.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        ASSIGN_OR_RETURN(GgufValue v, ReadValue(c, elem, depth + 1, budget, what));
        elems.push_back(std::move(v));
      }
      return GgufValue::Array(elem, std::move(elems));
    }
  }
  return absl::InternalError("unreachable");
}

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace

absl::Status GgufKeyError(absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("key '", key, "' ", why));
}

std::string GgufShapeString(const std::vector<uint64_t>& ne) {
  return absl::StrCat("[", absl::StrJoin(ne, ", "), "]");
}

std::string GgufTensorInfo::ShapeString() const { return GgufShapeString(ne); }

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path,
                                                         WeightsMemory memory, bool lock) {
  WeightsMemoryChoice choice{WeightsMemory::kMmap, 0, "mmap"};
  struct stat st;
  // Anything but a regular, non-empty file goes to the mapping, which says what is wrong.
  if (memory != WeightsMemory::kMmap && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_size > 0) {
    ASSIGN_OR_RETURN(choice, ChooseWeightsMemory(memory, st.st_size, ReadHostMemory()));
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped =
      choice.memory == WeightsMemory::kHugePages ? MappedFile::CopyToHugePages(path)
      : choice.memory == WeightsMemory::kHugetlb
          ? MappedFile::CopyToHugetlb(path, choice.page_bytes)
          : MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  std::unique_ptr<MappedFile> mapping = std::move(*mapped);
  if (lock) RETURN_IF_ERROR(mapping->Lock());
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->memory_ = std::move(choice);
  file->read_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  file->bytes_ = mapping->data();
  file->size_ = mapping->size();
  file->mapping_ = std::move(mapping);
  absl::Status status = file->ParseAll();
  if (!status.ok()) return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->bytes_ = data;
  file->size_ = size;
  RETURN_IF_ERROR(file->ParseAll());
  return file;
}

absl::Status GgufFile::ParseAll() {
  Cursor c(bytes_, size_);
  char magic[4];
  RETURN_IF_ERROR(c.Read(magic, 4, "magic"));
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return absl::InvalidArgumentError("not a GGUF file: magic is not \"GGUF\"");
  }
  ASSIGN_OR_RETURN(version_, c.Get<uint32_t>("version"));
  if (version_ != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF version ", version_, " is not supported (only version 3)"));
  }
  ASSIGN_OR_RETURN(uint64_t n_tensors, c.Get<uint64_t>("tensor count"));
  ASSIGN_OR_RETURN(uint64_t n_kv, c.Get<uint64_t>("key/value count"));
  // Each key/value record takes at least 13 bytes and each tensor record at least 28.
  if (n_kv > c.remaining() / 13 || n_tensors > c.remaining() / 28) {
    return absl::InvalidArgumentError(absl::StrCat("truncated file: header claims ", n_kv,
                                                   " keys and ", n_tensors,
                                                   " tensors, more than the file can hold"));
  }

  uint64_t element_budget = kMaxMetadataElements;
  kvs_.reserve(std::min<uint64_t>(n_kv, 1024));
  for (uint64_t i = 0; i < n_kv; ++i) {
    ASSIGN_OR_RETURN(std::string key, c.GetString(absl::StrCat("key #", i)));
    const std::string what = absl::StrCat("key '", key, "'");
    ASSIGN_OR_RETURN(GgufType type, ReadType(c, absl::StrCat(what, " value type")));
    ASSIGN_OR_RETURN(GgufValue value, ReadValue(c, type, 0, &element_budget, what));
    if (!kv_index_.emplace(key, kvs_.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate key '", key, "'"));
    }
    kvs_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* a = FindKey(gguf_keys::kGeneralAlignment)) {
    if (a->type() != GgufType::kUint32) {
      return absl::InvalidArgumentError(absl::StrCat("key 'general.alignment' has type ",
                                                     GgufTypeName(a->type()), ", expected UINT32"));
    }
    const uint64_t v = a->raw_uint();
    if (v == 0 || (v & (v - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("key 'general.alignment' is ", v, ", not a power of two"));
    }
    alignment_ = static_cast<uint32_t>(v);
  }

  tensors_.reserve(std::min<uint64_t>(n_tensors, 4096));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    ASSIGN_OR_RETURN(t.name, c.GetString(absl::StrCat("tensor #", i, " name")));
    const std::string what = absl::StrCat("tensor '", t.name, "'");
    ASSIGN_OR_RETURN(uint32_t n_dims, c.Get<uint32_t>(absl::StrCat(what, " dimension count")));
    if (n_dims < 1 || n_dims > kGgufMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has ", n_dims, " dimensions, expected 1 to ", kGgufMaxDims));
    }
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ASSIGN_OR_RETURN(uint64_t ne, c.Get<uint64_t>(absl::StrCat(what, " shape")));
      if (ne > static_cast<uint64_t>(INT64_MAX) || MulOverflows(t.n_elements, ne, &t.n_elements)) {
        return absl::InvalidArgumentError(absl::StrCat(what, " has an impossible shape"));
      }
      t.ne.push_back(ne);
    }
    ASSIGN_OR_RETURN(t.type, c.Get<uint32_t>(absl::StrCat(what, " type")));
    ASSIGN_OR_RETURN(t.offset, c.Get<uint64_t>(absl::StrCat(what, " offset")));
    const GgmlTypeInfo* info = FindGgmlType(t.type);
    if (info == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has ggml type ", t.type, ", which walsh does not know"));
    }
    if (t.ne[0] % info->block_elems != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " of type ", info->name, " has ne[0] = ", t.ne[0],
                       ", not a multiple of its block of ", info->block_elems));
    }
    if (MulOverflows(t.n_elements / info->block_elems, info->block_bytes, &t.n_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has an impossible size"));
    }
    if (t.offset % alignment_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " has data offset ", t.offset, ", not a multiple of the alignment ", alignment_));
    }
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", t.name, "'"));
    }
    tensors_.push_back(std::move(t));
  }

  const uint64_t header_end = c.pos();
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;
  if (tensors_.empty()) return absl::OkStatus();
  if (data_offset_ > size_) {
    return absl::InvalidArgumentError(absl::StrCat("truncated file: data section would start at ",
                                                   data_offset_, " but the file has ", size_,
                                                   " bytes"));
  }
  const uint64_t data_size = size_ - data_offset_;
  std::vector<const GgufTensorInfo*> by_offset;
  for (GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' data [", t.offset, ", ", t.offset + t.n_bytes,
                       ") runs past the end of the data section (", data_size, " bytes)"));
    }
    t.data = bytes_ + data_offset_ + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo* prev = by_offset[i - 1];
    if (by_offset[i]->offset < prev->offset + prev->n_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", by_offset[i]->name, "' overlaps the data of tensor '", prev->name, "'"));
    }
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::FindKey(absl::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

absl::Status Missing(absl::string_view key) {
  return absl::InvalidArgumentError(absl::StrCat("missing key '", key, "'"));
}

absl::Status WrongType(absl::string_view key, const GgufValue& v, absl::string_view expected) {
  std::string type = GgufTypeName(v.type());
  if (v.type() == GgufType::kArray) absl::StrAppend(&type, " of ", GgufTypeName(v.elem_type()));
  return absl::InvalidArgumentError(
      absl::StrCat("key '", key, "' has type ", type, ", expected ", expected));
}

}  // namespace

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key, int64_t min, int64_t max) const {
  const GgufValue* v = FindKey(key);
  if (v == nullptr) return Missing(key);
  if (!v->is_integer()) return WrongType(key, *v, "an integer");
  absl::StatusOr<int64_t> i = v->AsInt64();
  if (!i.ok() || *i < min || *i > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", key, "' is ", v->DebugString(), ", outside [", min, ", ", max, "]"));
  }
  return *i;
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  const GgufValue* v = FindKey(key);
  if (v == nullptr) return Missing(key);
  if (v->type() != GgufType::kFloat32 && v->type() != GgufType::kFloat64) {
    return WrongType(key, *v, "FLOAT32 or FLOAT64");
  }
  return v->raw_float();
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  const GgufValue* v = FindKey(key);
  if (v == nullptr) return Missing(key);
  if (v->type() != GgufType::kBool) return WrongType(key, *v, "BOOL");
  return v->raw_uint() != 0;
}

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  const GgufValue* v = FindKey(key);
  if (v == nullptr) return Missing(key);
  if (v->type() != GgufType::kString) return WrongType(key, *v, "STRING");
  return v->str();
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(absl::string_view key) const {
  const GgufValue* v = FindKey(key);
  if (v == nullptr) return Missing(key);
  if (v->type() != GgufType::kArray || !IsGgufIntegerType(v->elem_type())) {
    return WrongType(key, *v, "an ARRAY of integers");
  }
  std::vector<int64_t> out;
  out.reserve(v->elems().size());
  for (size_t i = 0; i < v->elems().size(); ++i) {
    absl::StatusOr<int64_t> x = v->elems()[i].AsInt64();
    if (!x.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key '", key, "' element ", i, " ", x.status().message()));
    }
    out.push_back(*x);
  }
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(absl::string_view key) const {
  const GgufValue* v = FindKey(key);
  if (v == nullptr) return Missing(key);
  if (v->type() != GgufType::kArray ||
      (v->elem_type() != GgufType::kFloat32 && v->elem_type() != GgufType::kFloat64)) {
    return WrongType(key, *v, "an ARRAY of FLOAT32 or FLOAT64");
  }
  std::vector<double> out;
  out.reserve(v->elems().size());
  for (const GgufValue& e : v->elems()) out.push_back(e.raw_float());
  return out;
}

absl::StatusOr<std::vector<bool>> GgufFile::GetBoolArray(absl::string_view key) const {
  const GgufValue* v = FindKey(key);
  if (v == nullptr) return Missing(key);
  if (v->type() != GgufType::kArray || v->elem_type() != GgufType::kBool) {
    return WrongType(key, *v, "an ARRAY of BOOL");
  }
  std::vector<bool> out;
  out.reserve(v->elems().size());
  for (const GgufValue& e : v->elems()) out.push_back(e.raw_uint() != 0);
  return out;
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(absl::string_view key) const {
  const GgufValue* v = FindKey(key);
  if (v == nullptr) return Missing(key);
  if (v->type() != GgufType::kArray || v->elem_type() != GgufType::kString) {
    return WrongType(key, *v, "an ARRAY of STRING");
  }
  std::vector<std::string> out;
  out.reserve(v->elems().size());
  for (const GgufValue& e : v->elems()) out.push_back(e.str());
  return out;
}

}  // namespace walsh
