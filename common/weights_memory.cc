#include "common/weights_memory.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace walsh {
namespace {

double GB(int64_t bytes) { return static_cast<double>(bytes) / 1e9; }

// Room the copy must leave: a quarter of the weights, and at least 1 GiB, for the KV cache,
// activations and everything else.
int64_t Headroom(int64_t file_bytes) { return std::max<int64_t>(file_bytes / 4, int64_t{1} << 30); }

int64_t RoundUp(int64_t bytes, int64_t page) { return (bytes + page - 1) / page * page; }

// The largest page size whose pool holds the copy; refused, listing every pool, where none does.
absl::StatusOr<WeightsMemoryChoice> ChooseHugetlbPool(int64_t file_bytes, const HostMemory& host) {
  std::string pools;
  for (const HugetlbPool& pool : host.hugetlb_pools) {
    const int64_t need = RoundUp(file_bytes, pool.page_bytes);
    if (pool.free_bytes() >= need) {
      return WeightsMemoryChoice{
          WeightsMemory::kHugetlb, pool.page_bytes,
          absl::StrFormat("the %.2f GB copy fits in %d free pages of %d kB", GB(file_bytes),
                          pool.free_pages, pool.page_bytes / 1024)};
    }
    absl::StrAppend(
        &pools, pools.empty() ? "" : "; ",
        absl::StrFormat("%d kB pages: %d free", pool.page_bytes / 1024, pool.free_pages),
        pool.cgroup_room_bytes >= 0 && pool.cgroup_room_bytes < need
            ? absl::StrFormat(", %.2f GB left under the cgroup's hugetlb limit",
                              GB(pool.cgroup_room_bytes))
            : "");
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "--weights-memory hugetlb: no hugetlbfs pool has room for the %.2f GB copy (%s); reserve "
      "pages with vm.nr_hugepages or hugepages=N at boot",
      GB(file_bytes), pools.empty() ? "no pools in /sys/kernel/mm/hugepages" : pools));
}

// The cgroup (v2) directory of this process, "" where there is none.
std::string CgroupDir() {
  std::ifstream cgroup("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroup, line)) {
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  }
  return "";
}

// A cgroup's room under one limit: max - current, -1 where the limit is "max" or absent.
int64_t CgroupRoom(const std::string& max_path, const std::string& current_path) {
  std::ifstream max_file(max_path), current_file(current_path);
  std::string max_text;
  int64_t max = 0, current = 0;
  if (max_file >> max_text && absl::SimpleAtoi(max_text, &max) && current_file >> current) {
    return std::max<int64_t>(0, max - current);
  }
  return -1;
}

// hugetlb's names for a page size in the cgroup's files: "64KB", "2MB", "1GB".
std::string CgroupPageName(int64_t page_bytes) {
  if (page_bytes >= (int64_t{1} << 30)) return absl::StrCat(page_bytes >> 30, "GB");
  if (page_bytes >= (int64_t{1} << 20)) return absl::StrCat(page_bytes >> 20, "MB");
  return absl::StrCat(page_bytes >> 10, "KB");
}

std::vector<HugetlbPool> ReadHugetlbPools(const std::string& cgroup_dir) {
  std::vector<HugetlbPool> pools;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/kernel/mm/hugepages", error)) {
    const std::string file_name = entry.path().filename().native();
    absl::string_view name = file_name;
    int64_t kb = 0;
    if (!absl::ConsumePrefix(&name, "hugepages-") || !absl::ConsumeSuffix(&name, "kB") ||
        !absl::SimpleAtoi(name, &kb)) {
      continue;
    }
    HugetlbPool pool;
    pool.page_bytes = kb * 1024;
    // Free pages already promised to a mapping (reserved, not yet faulted) are not free for us.
    std::ifstream free_file(entry.path() / "free_hugepages"),
        reserved_file(entry.path() / "resv_hugepages");
    int64_t reserved = 0;
    if (!(free_file >> pool.free_pages)) continue;
    if (reserved_file >> reserved)
      pool.free_pages = std::max<int64_t>(0, pool.free_pages - reserved);
    if (!cgroup_dir.empty()) {
      const std::string base = cgroup_dir + "/hugetlb." + CgroupPageName(pool.page_bytes);
      pool.cgroup_room_bytes = CgroupRoom(base + ".max", base + ".current");
    }
    pools.push_back(pool);
  }
  std::sort(pools.begin(), pools.end(),
            [](const HugetlbPool& a, const HugetlbPool& b) { return a.page_bytes > b.page_bytes; });
  return pools;
}

}  // namespace

bool ParseWeightsMemory(absl::string_view text, WeightsMemory* out) {
  if (text == "auto")
    *out = WeightsMemory::kAuto;
  else if (text == "hugepages")
    *out = WeightsMemory::kHugePages;
  else if (text == "hugetlb")
    *out = WeightsMemory::kHugetlb;
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
    case WeightsMemory::kHugetlb:
      return "hugetlb";
    case WeightsMemory::kMmap:
      return "mmap";
  }
  return "?";
}

int64_t HugetlbPool::free_bytes() const {
  const int64_t pool = free_pages * page_bytes;
  return cgroup_room_bytes < 0 ? pool : std::min(pool, cgroup_room_bytes);
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
  const std::string cgroup_dir = CgroupDir();
  if (!cgroup_dir.empty()) {
    host.cgroup_room_bytes = CgroupRoom(cgroup_dir + "/memory.max", cgroup_dir + "/memory.current");
    if (host.cgroup_room_bytes >= 0) {
      host.available_bytes = std::min(host.available_bytes, host.cgroup_room_bytes);
    }
  }
  host.hugetlb_pools = ReadHugetlbPools(cgroup_dir);
  return host;
}

absl::StatusOr<WeightsMemoryChoice> ChooseWeightsMemory(WeightsMemory asked, int64_t file_bytes,
                                                        const HostMemory& host) {
  if (asked == WeightsMemory::kMmap) {
    return WeightsMemoryChoice{WeightsMemory::kMmap, 0, "--weights-memory mmap"};
  }
  if (asked == WeightsMemory::kHugetlb) return ChooseHugetlbPool(file_bytes, host);
  const bool thp = host.thp_mode == "always" || host.thp_mode == "madvise";
  const int64_t need = file_bytes + Headroom(file_bytes);
  const bool fits = host.available_bytes >= need;
  if (thp && fits) {
    return WeightsMemoryChoice{
        WeightsMemory::kHugePages, 0,
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
  return WeightsMemoryChoice{WeightsMemory::kMmap, 0, absl::StrCat("auto: ", why)};
}

}  // namespace walsh
