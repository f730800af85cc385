// Shared by the fuzz targets: a reader that turns fuzz bytes into small structured choices, and
// a real BPE tokenizer to feed.
#ifndef WALSH_TESTS_FUZZ_FUZZ_INPUT_H_
#define WALSH_TESTS_FUZZ_FUZZ_INPUT_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "tools/mkmodel/synthetic_model.h"
#include "worker/model/gguf_file.h"
#include "worker/model/tokenizer.h"

namespace walsh::fuzz {

// Consumes the input front to back; past its end every read gives zeros / empty strings.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // Up to `max_len` bytes, the length taken from the input.
  std::string String(size_t max_len) {
    size_t n = Byte() % (max_len + 1);
    n = std::min(n, size_ - pos_);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::string Rest() {
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    pos_ = size_;
    return s;
  }
  bool empty() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A fuzz target's invariant that did not hold: report and abort, so the fuzzer keeps the input.
[[noreturn]] inline void Violated(const char* what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}

// The tokenizer of the synthetic "tiny" model (a qwen35 BPE vocabulary with merges and the
// ChatML special tokens), written to a scratch file and loaded once per process.
inline const Tokenizer& TinyTokenizer() {
  static const Tokenizer* tokenizer = [] {
    auto model = SyntheticModel::Create({.preset = "tiny"});
    if (!model.ok()) Violated("the tiny model cannot be made");
    char path[] = "/tmp/walsh-fuzz-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) Violated("no scratch file");
    close(fd);
    const absl::Status written = (*model)->WritePacked(path);
    auto file =
        written.ok() ? GgufFile::Open(path) : absl::StatusOr<std::unique_ptr<GgufFile>>(written);
    auto t = file.ok() ? Tokenizer::FromGguf(**file) : file.status();
    unlink(path);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
      Violated("the tiny model's tokenizer does not load");
    }
    return t->release();
  }();
  return *tokenizer;
}

}  // namespace walsh::fuzz

#endif  // WALSH_TESTS_FUZZ_FUZZ_INPUT_H_
