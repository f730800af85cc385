// The step image the CUDA backend uploads in one copy (worker/engine/packed_upload.h): every
// array at an aligned offset of its own, its values intact, empty arrays included.
#include "worker/engine/packed_upload.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace walsh {
namespace {

TEST(PackedUpload, EachArrayKeepsItsValuesAtAnAlignedSlotOfItsOwn) {
  PackedUpload image;
  const std::vector<int32_t> a = {1, -2, 3};
  const std::vector<int64_t> b = {int64_t{1} << 40, -7};
  const std::vector<int32_t> empty;
  const std::vector<float> c(37, 0.5f);
  const int64_t oa = image.Add(a), oe = image.Add(empty), ob = image.Add(b), oc = image.Add(c);
  for (int64_t o : {oa, oe, ob, oc}) EXPECT_EQ(o % PackedUpload::kAlignment, 0);
  EXPECT_LT(oa, oe);
  EXPECT_LT(oe, ob);  // an empty array still has a slot: its address is inside the image
  EXPECT_LT(ob, oc);
  EXPECT_GE(image.bytes(), oc + static_cast<int64_t>(c.size() * sizeof(float)));
  EXPECT_EQ(image.bytes() % PackedUpload::kAlignment, 0);
  EXPECT_EQ(std::memcmp(image.data() + oa, a.data(), a.size() * sizeof(int32_t)), 0);
  EXPECT_EQ(std::memcmp(image.data() + ob, b.data(), b.size() * sizeof(int64_t)), 0);
  EXPECT_EQ(std::memcmp(image.data() + oc, c.data(), c.size() * sizeof(float)), 0);

  image.Clear();
  EXPECT_EQ(image.bytes(), 0);
  EXPECT_EQ(image.Add(b), 0);
}

}  // namespace
}  // namespace walsh
