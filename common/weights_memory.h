// Where a model's weights live in host memory (--weights-memory, docs/operations.md "Weights in
// memory"): a read-only mapping of the file, as the page cache holds it (`mmap`), or anonymous
// memory the kernel is asked to back with transparent huge pages, filled from the file once at
// load and then made read-only (`hugepages`). A decode step walks every weight, and through 4 KiB
// pages the TLB misses can halve its speed. `auto` takes huge pages where the kernel allows
// them and the copy fits in the memory available with room to spare, and says why it chose.
#ifndef WALSH_COMMON_WEIGHTS_MEMORY_H_
#define WALSH_COMMON_WEIGHTS_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walsh {

enum class WeightsMemory { kAuto, kHugePages, kMmap };

// The flag's help, the same in walsh-worker, walsh-run and walsh-bench decode.
inline constexpr char kWeightsMemoryHelp[] =
    "where the weights live in host memory: auto (huge pages where the kernel allows them and "
    "the copy fits, else mmap; mmap with --device cuda), hugepages (a copy in transparent huge "
    "pages made at load, refused where THP is off or memory is short), mmap (the file's pages "
    "as the page cache holds them)";

// "auto", "hugepages", "mmap"; false for anything else.
bool ParseWeightsMemory(absl::string_view text, WeightsMemory* out);
const char* WeightsMemoryName(WeightsMemory m);

// What the machine offers: the THP mode (the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled, "" when unknown) and the memory available in
// bytes: MemAvailable, or less where this process's cgroup (v2) has less room under memory.max.
struct HostMemory {
  std::string thp_mode;
  int64_t available_bytes = 0;
  int64_t cgroup_room_bytes = -1;  // memory.max - memory.current; -1 without a limit
};
HostMemory ReadHostMemory();

struct WeightsMemoryChoice {
  WeightsMemory memory = WeightsMemory::kMmap;  // kHugePages or kMmap
  std::string reason;
};

// What to load with: `auto` on a GPU is mmap, the weights living on the device. (walsh-run's
// default is mmap: a one-shot run would pay the copy, and a cold page cache, every time.)
inline WeightsMemory WeightsMemoryFor(WeightsMemory asked, bool on_gpu) {
  return on_gpu && asked == WeightsMemory::kAuto ? WeightsMemory::kMmap : asked;
}

// The flag's check beside --device: a copy in host huge pages is of no use to a GPU.
inline bool WeightsMemoryFitsDevice(WeightsMemory asked, bool on_gpu) {
  return !(on_gpu && asked == WeightsMemory::kHugePages);
}
inline constexpr char kHugePagesOnGpuError[] =
    "--weights-memory hugepages is for --device cpu: with cuda the weights live on the GPU";

// The choice for a file of `file_bytes` under `asked`: `auto` decides; `hugepages` is refused
// (FAILED_PRECONDITION naming --weights-memory and why) where THP is off or the copy would not
// fit; `mmap` is always granted.
absl::StatusOr<WeightsMemoryChoice> ChooseWeightsMemory(WeightsMemory asked, int64_t file_bytes,
                                                        const HostMemory& host);

}  // namespace walsh

#endif  // WALSH_COMMON_WEIGHTS_MEMORY_H_
