// A parsed GGUF v3 file (docs/format.md §1): metadata, tensor table and bounds-checked views of
// the tensor data. Parsing never reads outside the buffer; a truncated or lying file is an
// error that says what was being read and where.
#ifndef WALSH_WORKER_MODEL_GGUF_FILE_H_
#define WALSH_WORKER_MODEL_GGUF_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mapped_file.h"
#include "common/weights_memory.h"
#include "worker/model/gguf_value.h"

namespace walsh {

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // ne[0] is the innermost (input) dimension
  uint32_t type = 0;         // ggml type id
  uint64_t offset = 0;       // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // points into the file's bytes

  uint64_t rows() const { return ne.empty() ? 0 : n_elements / ne[0]; }
  std::string ShapeString() const;
};

// INVALID_ARGUMENT "key 'KEY' WHY": how every check of a file's metadata names its key.
absl::Status GgufKeyError(absl::string_view key, absl::string_view why);
// "[a, b, c]", as refusals print shapes.
std::string GgufShapeString(const std::vector<uint64_t>& ne);

class GgufFile {
 public:
  // Maps `path` (or copies it into huge pages, as `memory` decides: common/weights_memory.h),
  // locks it in memory if `lock` (--mlock) and parses it; the memory lives as long as the
  // returned object.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                        WeightsMemory memory = WeightsMemory::kMmap,
                                                        bool lock = false);
  // Parses bytes owned by the caller, who keeps them alive as long as the result.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const uint8_t* data, size_t size);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }
  const uint8_t* bytes() const { return bytes_; }  // the whole file, as mapped or given
  // Where Open put the bytes, and why; and the seconds it took (the copy, for huge pages, and
  // the locking).
  const WeightsMemoryChoice& memory() const { return memory_; }
  double read_seconds() const { return read_seconds_; }

  const std::vector<std::pair<std::string, GgufValue>>& kvs() const { return kvs_; }
  const GgufValue* FindKey(absl::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(absl::string_view name) const;

  // Typed accessors. Errors name the key and say what was wrong with it.
  // Integer getters accept any GGUF integer type whose value fits the range asked for.
  absl::StatusOr<int64_t> GetInt(absl::string_view key, int64_t min, int64_t max) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;  // FLOAT32 or FLOAT64
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(absl::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(absl::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(absl::string_view key) const;  // FLOAT32/64
  absl::StatusOr<std::vector<bool>> GetBoolArray(absl::string_view key) const;

 private:
  GgufFile() = default;
  absl::Status ParseAll();

  std::unique_ptr<MappedFile> mapping_;
  WeightsMemoryChoice memory_;
  double read_seconds_ = 0;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  absl::flat_hash_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_GGUF_FILE_H_
