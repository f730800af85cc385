// A whole file in read-only memory, unmapped when the object goes away: a mapping of the file
// itself (Open), or a copy in anonymous memory backed by transparent huge pages where the kernel
// grants them (CopyToHugePages; common/weights_memory.h says when).
#ifndef WALSH_COMMON_MAPPED_FILE_H_
#define WALSH_COMMON_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace walsh {

class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  // Reads the file in parallel into 2 MiB-aligned anonymous memory advised MADV_HUGEPAGE, makes
  // it read-only and drops the file's pages from the page cache.
  static absl::StatusOr<std::unique_ptr<MappedFile>> CopyToHugePages(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size, void* mapping, size_t mapped)
      : path_(std::move(path)), data_(data), size_(size), mapping_(mapping), mapped_(mapped) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
  void* mapping_;  // what munmap takes: the whole mapping, alignment slack included
  size_t mapped_;
};

}  // namespace walsh

#endif  // WALSH_COMMON_MAPPED_FILE_H_
