// Shared helpers for walsh tests: shipped data, temporary directories, child processes.
#ifndef WALSH_TESTS_UTIL_TEST_UTIL_H_
#define WALSH_TESTS_UTIL_TEST_UTIL_H_

#include <string>
#include <vector>

namespace walsh::testing {

// gcc defines __SANITIZE_ADDRESS__; clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderAddressSanitizer = true;
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif

// Resident memory says nothing under AddressSanitizer: freed blocks sit in its quarantine.
inline constexpr bool kMemoryIsMeaningful = !kUnderAddressSanitizer;

// tests/data/<relative> in the source tree (conformance fixtures, each folder with a README on its
// provenance).
std::string TestDataPath(const std::string& relative);

std::string ReadFileOrDie(const std::string& path);
void WriteFileOrDie(const std::string& path, const std::string& bytes);

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct ProcessResult {
  int exit_code = -1;  // -1 if it did not exit normally
  std::string out;
  std::string err;
};

// Whether `s` is well-formed UTF-8 (RFC 3629: shortest forms, no surrogates, at most U+10FFFF),
// written here apart from the code under test.
bool WellFormedUtf8(const std::string& s);

// Runs argv[0] with the given arguments and stdin bytes, waits, and captures both streams.
ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& stdin_bytes = "");

}  // namespace walsh::testing

#endif  // WALSH_TESTS_UTIL_TEST_UTIL_H_
