// Runs the fuzz target over corpus files and directories without libFuzzer (any compiler):
// the regression half of fuzzing, run by ctest on every build.
//   <target>_fuzzer [--shard=I/N] PATH...   (--shard: only every Nth input from the I-th, in
//                                            name order, so ctest can run a corpus N-way)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  int first = 1, shard = 0, shards = 1;
  if (argc > 1 && std::string(argv[1]).rfind("--shard=", 0) == 0) {
    int consumed = 0;
    if (std::sscanf(argv[1], "--shard=%d/%d%n", &shard, &shards, &consumed) != 2 ||
        argv[1][consumed] != '\0' || shards < 1 || shard < 0 || shard >= shards) {
      std::fprintf(stderr, "--shard=I/N with 0 <= I < N, not %s\n", argv[1]);
      return 1;
    }
    first = 2;
  }
  std::vector<std::filesystem::path> files;
  for (int i = first; i < argc; ++i) {
    if (!std::filesystem::exists(argv[i])) {
      std::fprintf(stderr, "no such corpus path: %s\n", argv[i]);
      return 1;
    }
    if (std::filesystem::is_directory(argv[i])) {
      for (const auto& e : std::filesystem::directory_iterator(argv[i])) files.push_back(e.path());
    } else {
      files.push_back(argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  int count = 0;
  for (size_t k = shard; k < files.size(); k += shards) {
    std::ifstream in(files[k], std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    // Every prefix of a seed too: truncation is the commonest lie a file tells.
    for (size_t n = 0; n < bytes.size() && n < 4096; n += 7)
      LLVMFuzzerTestOneInput(bytes.data(), n);
    ++count;
  }
  std::printf("replayed %d inputs\n", count);
  return files.empty() ? 1 : 0;  // a corpus path with nothing in it is a mistake
}
