#include "worker/model/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_file.h"
#include "worker/model/gguf_keys.h"

namespace walsh {
namespace {

class StringSink : public GgufByteSink {
 public:
  absl::Status Write(const void* data, size_t size) override {
    out.append(static_cast<const char*>(data), size);
    return absl::OkStatus();
  }
  std::string out;
};

class FileSink : public GgufByteSink {
 public:
  explicit FileSink(std::FILE* f) : f_(f) {}
  absl::Status Write(const void* data, size_t size) override {
    if (size > 0 && std::fwrite(data, 1, size, f_) != size) {
      return absl::DataLossError(absl::StrCat("write failed: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

 private:
  std::FILE* f_;
};

// Counts what passes through so the writer can check each tensor's size.
class CountingSink : public GgufByteSink {
 public:
  explicit CountingSink(GgufByteSink* inner) : inner_(*inner) {}
  CountingSink(const CountingSink&) = delete;
  absl::Status Write(const void* data, size_t size) override {
    count += size;
    return inner_.Write(data, size);
  }
  uint64_t count = 0;

 private:
  GgufByteSink& inner_;
};

template <typename T>
absl::Status Put(GgufByteSink& out, T v) {
  return out.Write(&v, sizeof v);
}

absl::Status PutString(GgufByteSink& out, const std::string& s) {
  RETURN_IF_ERROR(Put<uint64_t>(out, s.size()));
  return out.Write(s.data(), s.size());
}

absl::Status PutValue(GgufByteSink& out, const GgufValue& v) {
  switch (v.type()) {
    case GgufType::kUint8:
    case GgufType::kBool:
      return Put<uint8_t>(out, static_cast<uint8_t>(v.raw_uint()));
    case GgufType::kInt8:
      return Put<int8_t>(out, static_cast<int8_t>(v.raw_int()));
    case GgufType::kUint16:
      return Put<uint16_t>(out, static_cast<uint16_t>(v.raw_uint()));
    case GgufType::kInt16:
      return Put<int16_t>(out, static_cast<int16_t>(v.raw_int()));
    case GgufType::kUint32:
      return Put<uint32_t>(out, static_cast<uint32_t>(v.raw_uint()));
    case GgufType::kInt32:
      return Put<int32_t>(out, static_cast<int32_t>(v.raw_int()));
    case GgufType::kUint64:
      return Put<uint64_t>(out, v.raw_uint());
    case GgufType::kInt64:
      return Put<int64_t>(out, v.raw_int());
    case GgufType::kFloat32:
      return Put<float>(out, static_cast<float>(v.raw_float()));
    case GgufType::kFloat64:
      return Put<double>(out, v.raw_float());
    case GgufType::kString:
      return PutString(out, v.str());
    case GgufType::kArray:
      RETURN_IF_ERROR(Put<uint32_t>(out, static_cast<uint32_t>(v.elem_type())));
      RETURN_IF_ERROR(Put<uint64_t>(out, v.elems().size()));
      for (const GgufValue& e : v.elems()) {
        if (e.type() != v.elem_type()) {
          return absl::InvalidArgumentError("array element type differs from the array's");
        }
        RETURN_IF_ERROR(PutValue(out, e));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("invalid value type");
}

absl::Status PutZeros(GgufByteSink& out, uint64_t n) {
  static constexpr char kZeros[64] = {};
  while (n > 0) {
    const uint64_t k = n < sizeof kZeros ? n : sizeof kZeros;
    RETURN_IF_ERROR(out.Write(kZeros, k));
    n -= k;
  }
  return absl::OkStatus();
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

void GgufWriter::SetKv(const std::string& key, GgufValue value) {
  for (auto& kv : kvs_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kvs_.emplace_back(key, std::move(value));
}

void GgufWriter::RemoveKv(const std::string& key) {
  for (auto it = kvs_.begin(); it != kvs_.end(); ++it) {
    if (it->first == key) {
      kvs_.erase(it);
      return;
    }
  }
}

absl::Status GgufWriter::AddTensor(std::string name, std::vector<uint64_t> ne, uint32_t type) {
  const GgmlTypeInfo* info = FindGgmlType(type);
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': unknown ggml type ", type));
  }
  if (ne.empty() || ne.size() > kGgufMaxDims || ne[0] % info->block_elems != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': shape does not fit type ", info->name));
  }
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  tensors_.push_back(
      {std::move(name), std::move(ne), type, n / info->block_elems * info->block_bytes});
  return absl::OkStatus();
}

absl::Status GgufWriter::WriteTo(GgufByteSink& out, const TensorFiller& fill) const {
  uint64_t alignment = kGgufDefaultAlignment;
  for (const auto& kv : kvs_) {
    if (kv.first == gguf_keys::kGeneralAlignment) alignment = kv.second.raw_uint();
  }
  if (alignment == 0) return absl::InvalidArgumentError("general.alignment is 0");

  CountingSink counted(&out);
  RETURN_IF_ERROR(counted.Write("GGUF", 4));
  RETURN_IF_ERROR(Put<uint32_t>(counted, 3));
  RETURN_IF_ERROR(Put<uint64_t>(counted, tensors_.size()));
  RETURN_IF_ERROR(Put<uint64_t>(counted, kvs_.size()));
  for (const auto& [key, value] : kvs_) {
    RETURN_IF_ERROR(PutString(counted, key));
    RETURN_IF_ERROR(Put<uint32_t>(counted, static_cast<uint32_t>(value.type())));
    RETURN_IF_ERROR(PutValue(counted, value));
  }
  uint64_t offset = 0;
  for (const GgufTensorSpec& t : tensors_) {
    RETURN_IF_ERROR(PutString(counted, t.name));
    RETURN_IF_ERROR(Put<uint32_t>(counted, static_cast<uint32_t>(t.ne.size())));
    for (uint64_t d : t.ne) RETURN_IF_ERROR(Put<uint64_t>(counted, d));
    RETURN_IF_ERROR(Put<uint32_t>(counted, t.type));
    RETURN_IF_ERROR(Put<uint64_t>(counted, offset));
    offset = AlignUp(offset + t.n_bytes, alignment);
  }
  RETURN_IF_ERROR(PutZeros(counted, AlignUp(counted.count, alignment) - counted.count));

  for (size_t i = 0; i < tensors_.size(); ++i) {
    const GgufTensorSpec& t = tensors_[i];
    CountingSink tensor_out(&counted);
    RETURN_IF_ERROR(fill(i, t, tensor_out));
    if (tensor_out.count != t.n_bytes) {
      return absl::InternalError(absl::StrCat("tensor '", t.name, "': filler wrote ",
                                              tensor_out.count, " bytes, expected ", t.n_bytes));
    }
    RETURN_IF_ERROR(PutZeros(counted, AlignUp(t.n_bytes, alignment) - t.n_bytes));
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::WriteFile(const std::string& path, const TensorFiller& fill) const {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, &std::fclose);
  std::setvbuf(f, nullptr, _IOFBF, 1 << 22);
  FileSink sink(f);
  absl::Status status = WriteTo(sink, fill);
  if (status.ok() && std::fclose(closer.release()) != 0) {
    status = absl::DataLossError(absl::StrCat("cannot close ", tmp, ": ", std::strerror(errno)));
  }
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    status = absl::DataLossError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  if (!status.ok()) {
    closer.reset();
    std::remove(tmp.c_str());
  }
  return status;
}

absl::StatusOr<std::string> GgufWriter::WriteString(const TensorFiller& fill) const {
  StringSink sink;
  RETURN_IF_ERROR(WriteTo(sink, fill));
  return std::move(sink.out);
}

}  // namespace walsh
