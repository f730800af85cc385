#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace walsh {
namespace {

constexpr size_t kTransparentHugePage = size_t{2} << 20;

// A descriptor of `path`, a regular file, and its size; the caller closes it.
absl::Status OpenRegular(const std::string& path, int* fd, size_t* size) {
  *fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (*fd < 0) {
    const int err = errno;
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
  }
  struct stat st;
  if (::fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(*fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  *size = static_cast<size_t>(st.st_size);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = -1;
  size_t size = 0;
  if (absl::Status s = OpenRegular(path, &fd, &size); !s.ok()) return s;
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot mmap ", path, ": ", std::strerror(err)));
    }
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  return std::unique_ptr<MappedFile>(
      new MappedFile(path, data, size, const_cast<uint8_t*>(data), size));
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::CopyToHugePages(const std::string& path) {
  return Copy(path, kTransparentHugePage, 0, "hugepages");
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::CopyToHugetlb(const std::string& path,
                                                                      int64_t page_bytes) {
  if (page_bytes <= 0 || (page_bytes & (page_bytes - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weights-memory hugetlb: page size ", page_bytes, " is not a power of 2"));
  }
  const int log2 = __builtin_ctzll(static_cast<unsigned long long>(page_bytes));
  return Copy(path, static_cast<size_t>(page_bytes), MAP_HUGETLB | (log2 << MAP_HUGE_SHIFT),
              "hugetlb");
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Copy(const std::string& path,
                                                             size_t page_bytes, int map_flags,
                                                             const char* flag) {
  int fd = -1;
  size_t size = 0;
  if (absl::Status s = OpenRegular(path, &fd, &size); !s.ok()) return s;
  if (size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  }
  const bool hugetlb = (map_flags & MAP_HUGETLB) != 0;
  const size_t rounded = (size + page_bytes - 1) / page_bytes * page_bytes;
  // Transparent huge pages need slack to start on a boundary; hugetlb mappings start on one.
  const size_t mapped = hugetlb ? rounded : rounded + page_bytes;
  void* mapping = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | map_flags, -1, 0);
  if (mapping == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("--weights-memory ", flag, ": cannot map ",
                                                     mapped, " bytes for ", path, ": ",
                                                     std::strerror(err)));
  }
  uint8_t* data = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(mapping) + page_bytes - 1) / page_bytes * page_bytes);
  auto fail = [&](const std::string& what, int err) {
    ::munmap(mapping, mapped);
    ::close(fd);
    return absl::InternalError(
        absl::StrCat("--weights-memory ", flag, ": ", what, " ", path, ": ", std::strerror(err)));
  };
  if (!hugetlb && ::madvise(data, rounded, MADV_HUGEPAGE) != 0) {
    return fail("madvise(MADV_HUGEPAGE) for", errno);
  }
  // Chunks of 64 MiB over a few threads: each pread faults its huge pages in as it lands.
  constexpr size_t kChunk = size_t{64} << 20;
  const size_t chunks = (size + kChunk - 1) / kChunk;
  const unsigned threads = static_cast<unsigned>(
      std::min<size_t>(chunks, std::clamp(std::thread::hardware_concurrency(), 1u, 8u)));
  std::atomic<size_t> next{0};
  std::atomic<int> read_error{0};  // an errno, or -1: the file ended before its size at open
  auto read_chunks = [&] {
    for (size_t c = next++; c < chunks && read_error == 0; c = next++) {
      size_t done = c * kChunk;
      const size_t end = std::min(size, done + kChunk);
      while (done < end) {
        const ssize_t got = ::pread(fd, data + done, end - done, static_cast<off_t>(done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
          read_error = got < 0 ? errno : -1;
          return;
        }
        done += static_cast<size_t>(got);
      }
    }
  };
  std::vector<std::thread> readers;
  for (unsigned t = 1; t < threads; ++t) {
    try {
      readers.emplace_back(read_chunks);
    } catch (const std::system_error&) {
      break;  // fewer readers: this thread reads what they would have
    }
  }
  read_chunks();
  for (std::thread& r : readers) r.join();
  if (read_error == -1) {
    ::munmap(mapping, mapped);
    ::close(fd);
    return absl::DataLossError(
        absl::StrCat("--weights-memory ", flag, ": ", path, " ended before its size at open"));
  }
  if (read_error != 0) return fail("cannot read", read_error);
  if (::mprotect(data, rounded, PROT_READ) != 0) {
    const int err = errno;
    return fail("mprotect(PROT_READ) for", err);
  }
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // the copy is what serves now
  ::close(fd);
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size, mapping, mapped));
}

absl::Status MappedFile::Lock() {
  if (size_ == 0 || ::mlock(data_, size_) == 0) return absl::OkStatus();
  const int err = errno;
  std::string limit;
  if (struct rlimit r; (err == ENOMEM || err == EPERM) && ::getrlimit(RLIMIT_MEMLOCK, &r) == 0) {
    limit = r.rlim_cur == RLIM_INFINITY
                ? "; RLIMIT_MEMLOCK is unlimited"
                : absl::StrCat("; RLIMIT_MEMLOCK is ", r.rlim_cur,
                               " bytes: raise it (ulimit -l, the container's memlock limit) or "
                               "grant CAP_IPC_LOCK");
  }
  return absl::ResourceExhaustedError(absl::StrCat("--mlock: cannot lock the ", size_, " bytes of ",
                                                   path_, ": ", std::strerror(err), limit));
}

MappedFile::~MappedFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapped_);
}

}  // namespace walsh
