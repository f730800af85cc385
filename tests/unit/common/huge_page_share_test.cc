// The huge-page share walsh reports (common/huge_page_share.h): parsed from smaps text, a
// mapping's totals clamped to the range asked about, and read live for memory this test maps.
#include "common/huge_page_share.h"

#include <sys/mman.h>

#include <cstring>

#include "gtest/gtest.h"

namespace walsh {
namespace {

constexpr char kSmaps[] =
    "7f0000000000-7f0000800000 r--p 00000000 08:01 42    /models/m.gguf\n"
    "Size:               8192 kB\n"
    "Rss:                6144 kB\n"
    "AnonHugePages:         0 kB\n"
    "ShmemPmdMapped:        0 kB\n"
    "FilePmdMapped:      4096 kB\n"
    "VmFlags: rd mr mw me\n"
    "7f0000800000-7f0000a00000 rw-p 00000000 00:00 0\n"
    "Rss:                2048 kB\n"
    "AnonHugePages:      2048 kB\n"
    "7f0001000000-7f0001200000 rw-p 00000000 00:00 0\n"
    "Rss:                2048 kB\n"
    "AnonHugePages:      2048 kB\n";

TEST(HugePageShare, SumsTheMappingsInsideTheRange) {
  const HugePageShare both = HugePageShareInSmaps(kSmaps, 0x7f0000000000, 0x7f0000a00000);
  EXPECT_EQ(both.resident_bytes, (6144 + 2048) * 1024);
  EXPECT_EQ(both.huge_page_bytes, (4096 + 2048) * 1024);
  const HugePageShare file = HugePageShareInSmaps(kSmaps, 0x7f0000000000, 0x7f0000800000);
  EXPECT_EQ(file.resident_bytes, 6144 * 1024);
  EXPECT_EQ(file.huge_page_bytes, 4096 * 1024);
  // A range that takes 1 MiB of the file's mapping: its totals count up to that much.
  const HugePageShare part = HugePageShareInSmaps(kSmaps, 0x7f0000700000, 0x7f0000800000);
  EXPECT_EQ(part.resident_bytes, 1024 * 1024);
  EXPECT_EQ(part.huge_page_bytes, 1024 * 1024);
  const HugePageShare none = HugePageShareInSmaps(kSmaps, 0x7f0000a00000, 0x7f0001000000);
  EXPECT_EQ(none.resident_bytes, 0);
  EXPECT_EQ(none.huge_page_bytes, 0);
}

TEST(HugePageShare, CountsHugetlbPagesWhichRssLeavesOut) {
  constexpr char kHugetlb[] =
      "7f0002000000-7f0002600000 r--p 00000000 00:10 7    /anon_hugepage (deleted)\n"
      "Size:               6144 kB\n"
      "Rss:                   0 kB\n"
      "AnonHugePages:         0 kB\n"
      "Shared_Hugetlb:        0 kB\n"
      "Private_Hugetlb:    4096 kB\n";
  const HugePageShare share = HugePageShareInSmaps(kHugetlb, 0x7f0002000000, 0x7f0002600000);
  EXPECT_EQ(share.resident_bytes, 4096 * 1024);
  EXPECT_EQ(share.huge_page_bytes, 4096 * 1024);
}

TEST(HugePageShare, ReadsThisProcessesMemory) {
  const size_t bytes = size_t{8} << 20;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  (void)madvise(p, bytes, MADV_HUGEPAGE);  // whether the kernel obliges depends on the machine
  std::memset(p, 1, bytes);
  auto share = HugePageShareOf(p, bytes);
  ASSERT_TRUE(share.ok()) << share.status();
  EXPECT_EQ(share->resident_bytes, static_cast<int64_t>(bytes));
  EXPECT_GE(share->huge_page_bytes, 0);
  EXPECT_LE(share->huge_page_bytes, share->resident_bytes);
  munmap(p, bytes);
}

}  // namespace
}  // namespace walsh
