// A whole file in read-only memory, unmapped when the object goes away: a mapping of the file
// itself (Open), or a copy in anonymous memory backed by transparent huge pages where the kernel
// grants them (CopyToHugePages) or by a reserved hugetlbfs pool (CopyToHugetlb;
// common/weights_memory.h says when).
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
  // The same in pages of `page_bytes` from the hugetlbfs pool of that size (MAP_HUGETLB), which
  // must hold the copy: the pages are reserved when mapped, so a short pool fails here, not at a
  // fault.
  static absl::StatusOr<std::unique_ptr<MappedFile>> CopyToHugetlb(const std::string& path,
                                                                   int64_t page_bytes);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Locks the bytes in memory (mlock), faulting in any not yet resident, as --mlock asks; the
  // error names the flag and, where the limit refused it, RLIMIT_MEMLOCK.
  absl::Status Lock();

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size, void* mapping, size_t mapped)
      : path_(std::move(path)), data_(data), size_(size), mapping_(mapping), mapped_(mapped) {}
  // The copies' one body: `flag` is the --weights-memory value named in errors.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Copy(const std::string& path,
                                                          size_t page_bytes, int map_flags,
                                                          const char* flag);

  std::string path_;
  const uint8_t* data_;
  size_t size_;
  void* mapping_;  // what munmap takes: the whole mapping, alignment slack included
  size_t mapped_;
};

}  // namespace walsh

#endif  // WALSH_COMMON_MAPPED_FILE_H_
