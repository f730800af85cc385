// Where a model's weights live in host memory (--weights-memory, docs/operations.md "Weights in
// memory"): a read-only mapping of the file, as the page cache holds it (`mmap`), or a copy filled
// from the file once at load and then made read-only, in anonymous memory the kernel is asked to
// back with transparent huge pages (`hugepages`) or in pages of a hugetlbfs pool the
// administrator reserved (`hugetlb`, the largest page size whose pool holds it). A decode step
// walks every weight, and through 4 KiB pages the TLB misses can halve its speed. `auto` takes
// transparent huge pages where the kernel allows them and the copy fits in the memory available
// with room to spare, and says why it chose; it never takes a reserved pool, which may be meant
// for another process or capped by the container (a hugetlb fault past a cgroup's cap is SIGBUS).
#ifndef WALSH_COMMON_WEIGHTS_MEMORY_H_
#define WALSH_COMMON_WEIGHTS_MEMORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walsh {

enum class WeightsMemory { kAuto, kHugePages, kHugetlb, kMmap };

// The flag's help, the same in walsh-worker, walsh-run and walsh-bench decode.
inline constexpr char kWeightsMemoryHelp[] =
    "where the weights live in host memory: auto (huge pages where the kernel allows them and "
    "the copy fits, else mmap; mmap with --device cuda), hugepages (a copy in transparent huge "
    "pages made at load, refused where THP is off or memory is short), hugetlb (a copy in the "
    "largest reserved hugetlbfs pages that hold it, refused where no pool does), mmap (the "
    "file's pages as the page cache holds them)";

inline constexpr char kMlockHelp[] =
    "lock the weights in memory (mlock) at load, so the kernel never pages them out; needs "
    "RLIMIT_MEMLOCK (ulimit -l) or CAP_IPC_LOCK for the model's size; --device cpu";
inline constexpr char kMlockOnGpuError[] =
    "--mlock is for --device cpu: with cuda the weights live on the GPU";

// "auto", "hugepages", "hugetlb", "mmap"; false for anything else.
inline constexpr char kWeightsMemoryNames[] = "auto, hugepages, hugetlb or mmap";
bool ParseWeightsMemory(absl::string_view text, WeightsMemory* out);
const char* WeightsMemoryName(WeightsMemory m);

// What the machine offers: the THP mode (the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled, "" when unknown) and the memory available in
// bytes: MemAvailable, or less where this process's cgroup (v2) has less room under memory.max.
// Each hugetlbfs pool (/sys/kernel/mm/hugepages/hugepages-<size>kB): its page size and free
// pages (free_hugepages less those reserved by other mappings), the free bytes capped by this
// cgroup's hugetlb.<size>.max less its usage.
struct HugetlbPool {
  int64_t page_bytes = 0;
  int64_t free_pages = 0;
  int64_t cgroup_room_bytes = -1;  // -1 without a limit
  int64_t free_bytes() const;
};
struct HostMemory {
  std::string thp_mode;
  int64_t available_bytes = 0;
  int64_t cgroup_room_bytes = -1;  // memory.max - memory.current; -1 without a limit
  std::vector<HugetlbPool> hugetlb_pools;
};
HostMemory ReadHostMemory();

struct WeightsMemoryChoice {
  WeightsMemory memory = WeightsMemory::kMmap;  // kHugePages, kHugetlb or kMmap
  int64_t page_bytes = 0;                       // kHugetlb: the pool's page size
  std::string reason;
};

// What to load with: `auto` on a GPU is mmap, the weights living on the device. (walsh-run's
// default is mmap: a one-shot run would pay the copy, and a cold page cache, every time.)
inline WeightsMemory WeightsMemoryFor(WeightsMemory asked, bool on_gpu) {
  return on_gpu && asked == WeightsMemory::kAuto ? WeightsMemory::kMmap : asked;
}

// The flag's check beside --device: a copy in host huge pages is of no use to a GPU.
inline bool WeightsMemoryFitsDevice(WeightsMemory asked, bool on_gpu) {
  return !(on_gpu && (asked == WeightsMemory::kHugePages || asked == WeightsMemory::kHugetlb));
}
inline constexpr char kHugePagesOnGpuError[] =
    "--weights-memory hugepages and hugetlb are for --device cpu: with cuda the weights live on "
    "the GPU";

// The choice for a file of `file_bytes` under `asked`: `auto` decides; `hugepages` is refused
// (FAILED_PRECONDITION naming --weights-memory and why) where THP is off or the copy would not
// fit, `hugetlb` where no pool has free pages for it; `mmap` is always granted.
absl::StatusOr<WeightsMemoryChoice> ChooseWeightsMemory(WeightsMemory asked, int64_t file_bytes,
                                                        const HostMemory& host);

}  // namespace walsh

#endif  // WALSH_COMMON_WEIGHTS_MEMORY_H_
