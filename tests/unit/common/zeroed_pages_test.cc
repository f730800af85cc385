// ZeroedPages: zeroed, writable over exactly its size, at least one byte, and moved without a
// second unmap (ASan and the guard pages would report a double or stray one).
#include "common/zeroed_pages.h"

#include <algorithm>
#include <utility>

#include "gtest/gtest.h"

namespace walsh {
namespace {

TEST(ZeroedPages, ZeroedAndWritableOverItsSize) {
  auto pages = ZeroedPages::Map(3 * 4096 + 5, "test pool");
  ASSERT_TRUE(pages.ok()) << pages.status();
  ASSERT_EQ(pages->size(), 3 * 4096 + 5u);
  EXPECT_TRUE(
      std::all_of(pages->data(), pages->data() + pages->size(), [](uint8_t b) { return b == 0; }));
  std::fill(pages->data(), pages->data() + pages->size(), 0xab);
  EXPECT_EQ(pages->data()[pages->size() - 1], 0xab);
}

TEST(ZeroedPages, AnEmptyRequestIsOneByte) {
  auto pages = ZeroedPages::Map(0, "test pool");
  ASSERT_TRUE(pages.ok()) << pages.status();
  EXPECT_EQ(pages->size(), 1u);
  pages->data()[0] = 1;
}

TEST(ZeroedPages, MovesHandOverTheMapping) {
  auto a = ZeroedPages::Map(100, "a");
  auto b = ZeroedPages::Map(200, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  uint8_t* const a_data = a->data();
  ZeroedPages moved(std::move(*a));
  EXPECT_EQ(moved.data(), a_data);
  EXPECT_EQ(a->data(), nullptr);
  moved = std::move(*b);  // unmaps a's mapping, takes b's
  EXPECT_EQ(moved.size(), 200u);
  moved.data()[199] = 7;
}

TEST(ZeroedPages, HugePagesStartOnA2MiBBoundary) {
  const size_t bytes = (size_t{5} << 20) + 3;
  auto pages = ZeroedPages::Map(bytes, "KV cache", ZeroedPages::Pages::kHuge);
  ASSERT_TRUE(pages.ok()) << pages.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pages->data()) % (size_t{2} << 20), 0u);
  ASSERT_EQ(pages->size(), bytes);
  EXPECT_TRUE(std::all_of(pages->data(), pages->data() + bytes, [](uint8_t b) { return b == 0; }));
  std::fill(pages->data(), pages->data() + bytes, 0x5a);
  EXPECT_EQ(pages->data()[bytes - 1], 0x5a);
  // Below one huge page the request keeps small pages, and its size.
  auto small = ZeroedPages::Map(4096, "state", ZeroedPages::Pages::kHuge);
  ASSERT_TRUE(small.ok());
  small->data()[4095] = 1;
}

TEST(ZeroedPages, AnImpossibleSizeIsRefusedNamingWhat) {
  auto pages = ZeroedPages::Map(size_t{1} << 62, "KV cache");
  ASSERT_FALSE(pages.ok());
  EXPECT_EQ(pages.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(pages.status().message().find("KV cache"), std::string::npos) << pages.status();
}

}  // namespace
}  // namespace walsh
