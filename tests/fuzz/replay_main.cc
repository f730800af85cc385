// Runs the fuzz target over corpus files and directories without libFuzzer (any compiler):
// the regression half of fuzzing, run by ctest on every build.
//   <target>_fuzzer [--shard=I/N] [--whole] PATH...
//     --shard: only every Nth input from the I-th, in name order, so ctest can run a corpus N-way
//     --whole: each input whole only, not also its prefixes (tests/fuzz/CMakeLists.txt says which)
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
  bool prefixes = true;
  for (; first < argc && std::string(argv[first]).rfind("--", 0) == 0; ++first) {
    const std::string flag = argv[first];
    if (flag == "--whole") {
      prefixes = false;
      continue;
    }
    int consumed = 0;
    if (flag.rfind("--shard=", 0) != 0 ||
        std::sscanf(argv[first], "--shard=%d/%d%n", &shard, &shards, &consumed) != 2 ||
        argv[first][consumed] != '\0' || shards < 1 || shard < 0 || shard >= shards) {
      std::fprintf(stderr, "expected --shard=I/N with 0 <= I < N, or --whole; not %s\n",
                   argv[first]);
      return 1;
    }
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
    for (size_t n = 0; prefixes && n < bytes.size() && n < 4096; n += 7)
      LLVMFuzzerTestOneInput(bytes.data(), n);
    ++count;
  }
  std::printf("replayed %d inputs\n", count);
  return files.empty() ? 1 : 0;  // a corpus path with nothing in it is a mistake
}
