// The gateway's prefix-affinity key agrees with the workers' prefix-cache granularity.
#include "gateway/routing/prefix_key.h"

#include "gtest/gtest.h"

namespace walsh {
namespace {

v1::GenerateRequest Ids(std::vector<int32_t> ids) {
  v1::GenerateRequest r;
  for (int32_t id : ids) r.mutable_tokens()->add_ids(id);
  return r;
}

std::vector<int32_t> Doc(int n, int32_t tail) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = i * 7 % 500;
  v.push_back(tail);
  return v;
}

TEST(PrefixAffinityKey, TheWindowIsTheSnapshotMinimumInWholePages) {
  EXPECT_EQ(AffinityWindow(16, 128), 128);
  EXPECT_EQ(AffinityWindow(16, 100), 96);
  EXPECT_EQ(AffinityWindow(16, 5), 5);
  EXPECT_EQ(AffinityWindow(16, 0), kDefaultAffinityWindow);  // caching off
  EXPECT_EQ(AffinityWindow(0, 0), kDefaultAffinityWindow);   // an older worker
}

TEST(PrefixAffinityKey, RequestsSharingTheWindowShareTheKeyAndOnlyThose) {
  const int64_t w = AffinityWindow(16, 128);
  // A shared 200-token document with different questions: one key.
  EXPECT_EQ(PrefixAffinityKey(Ids(Doc(200, 1)), w), PrefixAffinityKey(Ids(Doc(200, 2)), w));
  EXPECT_EQ(PrefixAffinityKey(Ids(Doc(128, 1)), w), PrefixAffinityKey(Ids(Doc(128, 2)), w));
  // Sharing fewer tokens than any snapshot needs: no reason to meet.
  EXPECT_NE(PrefixAffinityKey(Ids(Doc(100, 1)), w), PrefixAffinityKey(Ids(Doc(100, 2)), w));
  std::vector<int32_t> other = Doc(200, 1);
  other[127] += 1;
  EXPECT_NE(PrefixAffinityKey(Ids(Doc(200, 1)), w), PrefixAffinityKey(Ids(other), w));
}

TEST(PrefixAffinityKey, TextIsKeyedOnAsManyBytesAsTheWindowHasTokens) {
  v1::GenerateRequest a, b, c;
  const std::string doc(128, 'x');
  a.set_text(doc + " first question");
  b.set_text(doc + " second question");
  c.set_text(std::string(127, 'x') + "y and more");
  EXPECT_EQ(PrefixAffinityKey(a, 128), PrefixAffinityKey(b, 128));
  EXPECT_NE(PrefixAffinityKey(a, 128), PrefixAffinityKey(c, 128));
  v1::GenerateRequest chat1, chat2;
  for (v1::GenerateRequest* r : {&chat1, &chat2}) {
    auto* m = r->mutable_chat()->add_messages();
    m->set_role("system");
    m->set_content(doc);
  }
  chat1.mutable_chat()->add_messages()->set_content("one");
  chat2.mutable_chat()->add_messages()->set_content("two");
  EXPECT_EQ(PrefixAffinityKey(chat1, 128), PrefixAffinityKey(chat2, 128));
  // The HTTP face's chats come as pieces: keyed on their text, as `text` is.
  auto pieces = [&](const std::string& question) {
    v1::GenerateRequest r;
    for (const auto& [text, markup] :
         std::vector<std::pair<std::string, bool>>{{"<|im_start|>system\n", true},
                                                   {doc, false},
                                                   {"<|im_end|>\n", true},
                                                   {question, false}}) {
      v1::PromptPiece* p = r.mutable_pieces()->add_pieces();
      p->set_text(text);
      p->set_markup(markup);
    }
    return r;
  };
  EXPECT_EQ(PrefixAffinityKey(pieces("one"), 128), PrefixAffinityKey(pieces("two"), 128));
  v1::GenerateRequest joined;
  joined.set_text("<|im_start|>system\n" + doc + "<|im_end|>\none");
  EXPECT_EQ(PrefixAffinityKey(pieces("one"), 128), PrefixAffinityKey(joined, 128));
  v1::GenerateRequest other = pieces("one");
  other.mutable_pieces()->mutable_pieces(1)->set_text("y" + doc);
  EXPECT_NE(PrefixAffinityKey(pieces("one"), 128), PrefixAffinityKey(other, 128));
}

}  // namespace
}  // namespace walsh
