// ApiKeys in-process: one "Bearer KEY" header whose key is listed, from --api-key and from the
// key file (comments, blank lines), reloaded; every refusal UNAUTHENTICATED or, for a bad file,
// INVALID_ARGUMENT naming the flag.
#include "common/api_keys.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace walsh {
namespace {

struct TempFile {
  std::string path = ::testing::TempDir() + "api_keys_test_" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name();
  void Write(const std::string& text) { std::ofstream(path) << text; }
  ~TempFile() { std::remove(path.c_str()); }
};

TEST(ApiKeys, OneBearerHeaderWithAListedKey) {
  ApiKeys keys("sk-one", "");
  ASSERT_TRUE(keys.Load().ok());
  EXPECT_TRUE(keys.Check({"Bearer sk-one"}).ok());
  EXPECT_TRUE(keys.Check({"bearer   sk-one"}).ok());
  const absl::Status missing = keys.Check({});
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(missing.message().find("required"), absl::string_view::npos) << missing;
  EXPECT_EQ(keys.Check({"Bearer sk-one", "Bearer sk-one"}).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(keys.Check({"Bearer sk-two"}).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(keys.Check({"Basic sk-one"}).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(keys.Check({"sk-one"}).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(keys.Check({"Bearer sk-on"}).code(), absl::StatusCode::kUnauthenticated);
}

// Every spelling the check accepts presents the same key, which the per-client limits key on.
TEST(ApiKeys, EverySpellingPresentsTheSameKey) {
  for (const char* header :
       {"Bearer sk-one", "bearer sk-one", "BEARER sk-one", "Bearer   sk-one", "bEaReR \tsk-one"}) {
    EXPECT_EQ(PresentedKey(header), "sk-one") << header;
  }
  EXPECT_EQ(PresentedKey("Basic sk-one"), "");
  EXPECT_EQ(PresentedKey("sk-one"), "");
  EXPECT_EQ(PresentedKey("Bearer "), "");
}

TEST(ApiKeys, WithoutKeysEveryCallPasses) {
  ApiKeys keys("", "");
  ASSERT_TRUE(keys.Load().ok());
  EXPECT_FALSE(keys.enabled());
  EXPECT_TRUE(keys.Check({}).ok());
}

TEST(ApiKeys, TheFileIsReadWithCommentsAndReloaded) {
  TempFile file;
  file.Write("# fleet keys\n\nsk-a  # alice\nsk-b\n");
  ApiKeys keys("", file.path);
  ASSERT_TRUE(keys.Load().ok());
  EXPECT_EQ(keys.count(), 2u);
  EXPECT_TRUE(keys.Check({"Bearer sk-a"}).ok());
  EXPECT_TRUE(keys.Check({"Bearer sk-b"}).ok());
  EXPECT_FALSE(keys.Check({"Bearer #"}).ok());
  file.Write("sk-c\n");
  ASSERT_TRUE(keys.Load().ok());
  EXPECT_FALSE(keys.Check({"Bearer sk-a"}).ok());
  EXPECT_TRUE(keys.Check({"Bearer sk-c"}).ok());
  // A bad file is refused naming the flag and the line; the keys in force stay.
  file.Write("sk-d sk-e\n");
  const absl::Status bad = keys.Load();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--api-key-file: line 1"), absl::string_view::npos) << bad;
  EXPECT_TRUE(keys.Check({"Bearer sk-c"}).ok());
  file.Write("# nothing\n");
  EXPECT_FALSE(keys.Load().ok());
}

}  // namespace
}  // namespace walsh
