// Writes GGUF v3 files (docs/format.md §1) that our reader and llama.cpp's accept. Tensor data is
// streamed: the caller produces each tensor's bytes in order, so multi-gigabyte models are
// written with little memory.
#ifndef WALSH_WORKER_MODEL_GGUF_WRITER_H_
#define WALSH_WORKER_MODEL_GGUF_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/gguf_value.h"

namespace walsh {

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t n_bytes = 0;  // filled in by AddTensor
};

// Receives one tensor's bytes; the total must equal the tensor's size.
class GgufByteSink {
 public:
  virtual ~GgufByteSink() = default;
  virtual absl::Status Write(const void* data, size_t size) = 0;
};

class GgufWriter {
 public:
  // Appends a key, or replaces the value of one already set (keeping its position).
  void SetKv(const std::string& key, GgufValue value);
  void RemoveKv(const std::string& key);
  const std::vector<std::pair<std::string, GgufValue>>& kvs() const { return kvs_; }

  // Declares the next tensor. Fails on an unknown type or a shape the type cannot hold.
  absl::Status AddTensor(std::string name, std::vector<uint64_t> ne, uint32_t type);
  const std::vector<GgufTensorSpec>& tensors() const { return tensors_; }
  std::vector<GgufTensorSpec>& mutable_tensors() { return tensors_; }

  // Produces the bytes of tensor `index` into the sink.
  using TensorFiller =
      std::function<absl::Status(size_t index, const GgufTensorSpec& spec, GgufByteSink& sink)>;

  // Writes `path` atomically (a temporary file renamed at the end).
  absl::Status WriteFile(const std::string& path, const TensorFiller& fill) const;
  // Serializes the whole file into memory (tests, fuzz seeds).
  absl::StatusOr<std::string> WriteString(const TensorFiller& fill) const;

 private:
  absl::Status WriteTo(GgufByteSink& out, const TensorFiller& fill) const;

  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::vector<GgufTensorSpec> tensors_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_MODEL_GGUF_WRITER_H_
