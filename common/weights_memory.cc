#include "common/weights_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace walsh {
namespace {

double GB(int64_t bytes) { return static_cast<double>(bytes) / 1e9; }

// Room the copy must leave: a quarter of the weights, and at least 1 GiB, for the KV cache,
// activations and everything else.
int64_t Headroom(int64_t file_bytes) { return std::max<int64_t>(file_bytes / 4, int64_t{1} << 30); }

}  // namespace

bool ParseWeightsMemory(absl::string_view text, WeightsMemory* out) {
  if (text == "auto")
    *out = WeightsMemory::kAuto;
  else if (text == "hugepages")
    *out = WeightsMemory::kHugePages;
  else if (text == "mmap")
    *out = WeightsMemory::kMmap;
  else
    return false;
  return true;
}

const char* WeightsMemoryName(WeightsMemory m) {
  switch (m) {
    case WeightsMemory::kAuto:
      return "auto";
    case WeightsMemory::kHugePages:
      return "hugepages";
    case WeightsMemory::kMmap:
      return "mmap";
  }
  return "?";
}

HostMemory ReadHostMemory() {
  HostMemory host;
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string word;
  while (thp >> word) {
    if (word.size() > 2 && word.front() == '[' && word.back() == ']') {
      host.thp_mode = word.substr(1, word.size() - 2);
    }
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemAvailable:") host.available_bytes = kb * 1024;
    meminfo.ignore(64, '\n');
  }
  // In a container the cgroup's limit binds first (cgroup v2: memory.max less memory.current):
  // the copy is anonymous memory charged to it, which the page cache's pages were not.
  std::ifstream cgroup("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroup, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    std::ifstream max_file(dir + "/memory.max"), current_file(dir + "/memory.current");
    std::string max_text;
    int64_t max = 0, current = 0;
    if (max_file >> max_text && absl::SimpleAtoi(max_text, &max) && current_file >> current) {
      host.cgroup_room_bytes = std::max<int64_t>(0, max - current);
      host.available_bytes = std::min(host.available_bytes, host.cgroup_room_bytes);
    }
  }
  return host;
}

absl::StatusOr<WeightsMemoryChoice> ChooseWeightsMemory(WeightsMemory asked, int64_t file_bytes,
                                                        const HostMemory& host) {
  if (asked == WeightsMemory::kMmap) {
    return WeightsMemoryChoice{WeightsMemory::kMmap, "--weights-memory mmap"};
  }
  const bool thp = host.thp_mode == "always" || host.thp_mode == "madvise";
  const int64_t need = file_bytes + Headroom(file_bytes);
  const bool fits = host.available_bytes >= need;
  if (thp && fits) {
    return WeightsMemoryChoice{
        WeightsMemory::kHugePages,
        absl::StrFormat("%stransparent huge pages are '%s' and the %.2f GB copy fits in %.2f GB "
                        "available",
                        asked == WeightsMemory::kAuto ? "auto: " : "", host.thp_mode,
                        GB(file_bytes), GB(host.available_bytes))};
  }
  const std::string why = !thp ? absl::StrCat("transparent huge pages are '",
                                              host.thp_mode.empty() ? "unavailable" : host.thp_mode,
                                              "' (/sys/kernel/mm/transparent_hugepage/enabled)")
                               : absl::StrFormat(
                                     "the %.2f GB copy needs %.2f GB available with its headroom; "
                                     "MemAvailable is %.2f GB",
                                     GB(file_bytes), GB(need), GB(host.available_bytes));
  if (asked == WeightsMemory::kHugePages) {
    return absl::FailedPreconditionError(absl::StrCat("--weights-memory hugepages: ", why));
  }
  return WeightsMemoryChoice{WeightsMemory::kMmap, absl::StrCat("auto: ", why)};
}

}  // namespace walsh
