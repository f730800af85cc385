// The bounds that keep a hostile constraint from stalling a worker (docs/structured_output.md
// §Bounds): compilation refuses what would explode, every mask runs under a budget that a
// cancel reaches and that caches nothing partial, and warming stops when no request uses the
// grammar.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "constraint/compiled_grammar.h"
#include "constraint/constraint_cache.h"
#include "constraint/grammar_matcher.h"
#include "constraint/json_schema_compiler.h"
#include "constraint/mask_budget.h"
#include "constraint/mask_prefetcher.h"
#include "constraint/regex_compiler.h"
#include "gtest/gtest.h"

namespace walsh {
namespace {

// Every byte as a token, then every pair of printable ASCII letters.
std::shared_ptr<const TokenTrie> Vocabulary() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) tokens.push_back(std::string{a, b});
  }
  return std::make_shared<const TokenTrie>(tokens);
}

std::shared_ptr<const CompiledGrammar> CompileRegex(const std::string& pattern,
                                                    std::shared_ptr<const TokenTrie> trie) {
  absl::StatusOr<Grammar> g = RegexGrammar(pattern);
  EXPECT_TRUE(g.ok()) << pattern << ": " << g.status();
  if (!g.ok()) return nullptr;
  return std::make_shared<const CompiledGrammar>(*g, std::move(trie));
}

// A pattern under the fan-out bound whose masks still cost a lot of expansion work: 30 optional
// characters, each of which any character may fill.
const char kCostly[] = "(.?){30}.{30}";

TEST(MaskBudget, CountsWorkAndNamesTheBoundItRanPast) {
  MaskBudget work(MaskLimits{.work = 100, .time = std::chrono::milliseconds(0)});
  EXPECT_TRUE(work.Spend(60));
  EXPECT_FALSE(work.Spend(60));
  EXPECT_FALSE(work.Spend(0));  // spent stays spent
  EXPECT_EQ(work.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(work.status().message().find("--constraint-mask-work"), std::string::npos);

  std::atomic<bool> cancelled{false};
  MaskBudget cancel(MaskLimits{.work = 0, .time = std::chrono::milliseconds(0)}, &cancelled);
  EXPECT_TRUE(cancel.Spend(1 << 20));
  cancelled = true;
  EXPECT_FALSE(cancel.Spend(1 << 20));
  EXPECT_EQ(cancel.status().code(), absl::StatusCode::kCancelled);

  MaskBudget late(MaskLimits{.work = 0, .time = std::chrono::milliseconds(1)});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (late.Spend(1 << 20) && std::chrono::steady_clock::now() < until) {
  }
  EXPECT_EQ(late.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(late.status().message().find("--constraint-mask-timeout-ms"), std::string::npos);
}

// Repetitions of something that can be empty multiply the ways a position begins; past the
// bound compilation refuses, naming the rule. The same counts over non-empty items are fine.
TEST(GrammarFanout, NestedEmptyableRepetitionsAreRefusedAtCompile) {
  for (const char* hostile :
       {"(.?){2000}.{2000}", "(.?){100}.{100}", "(a?){600}", "(a|b?){0,2000}", "((a?)(b?)){300}"}) {
    absl::StatusOr<Grammar> g = RegexGrammar(hostile);
    ASSERT_FALSE(g.ok()) << hostile;
    EXPECT_NE(g.status().message().find("can begin more than 512 ways"), std::string::npos)
        << hostile << ": " << g.status();
  }
  for (const char* fine :
       {".{0,2000}", "(ab?){1000}", "(a?){400}", "[a-z]{1,2000}x?y?z?", "(a*)*", kCostly}) {
    EXPECT_TRUE(RegexGrammar(fine).ok()) << fine << ": " << RegexGrammar(fine).status();
  }
}

// A long enum shares its values' prefixes: it stays under the fan-out bound, and every value,
// the last included, stays reachable (one alternative per value would begin 1,000 ways, and
// the matcher would follow the first 512).
TEST(GrammarFanout, ALongEnumKeepsEveryValue) {
  std::string schema = R"({"enum":[)";
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&schema, i ? "," : "", "\"v", i, "\"");
  schema += "]}";
  absl::StatusOr<Grammar> g = JsonSchemaGrammar(schema);
  ASSERT_TRUE(g.ok()) << g.status();
  CompiledGrammar compiled(*g, Vocabulary());
  auto matches = [&](const std::string& text) {
    std::vector<GrammarStack> at = compiled.Start(), next;
    for (char c : text) {
      compiled.Advance(at, static_cast<uint8_t>(c), next);
      at.swap(next);
    }
    return std::any_of(at.begin(), at.end(), [](const GrammarStack& s) { return s.empty(); });
  };
  EXPECT_TRUE(matches("\"v0\""));
  EXPECT_TRUE(matches("\"v99\""));
  EXPECT_TRUE(matches("\"v999\""));
  EXPECT_FALSE(matches("\"v1000\""));
  EXPECT_FALSE(matches("\"v\""));
}

// A mask that runs past its budget says so and leaves nothing half-computed in the grammar's
// caches (the contexts it finished are whole): the same mask computed later without a bound
// equals a fresh grammar's.
TEST(MaskBudget, AMaskPastItsBudgetFailsAndCachesNothing) {
  auto trie = Vocabulary();
  auto g = CompileRegex(kCostly, trie);
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  std::vector<uint64_t> bits;
  MaskBudget small(MaskLimits{.work = 1 << 16, .time = std::chrono::milliseconds(0)});
  const absl::Status s = m.FillMask(bits, small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;

  MaskBudget unbounded;
  ASSERT_TRUE(m.FillMask(bits, unbounded).ok());
  auto fresh = CompileRegex(kCostly, trie);
  std::vector<uint64_t> expected;
  GrammarMatcher(fresh).FillMask(expected);
  EXPECT_EQ(bits, expected);
  EXPECT_GT(unbounded.used(), 1 << 16);

  // Advancing past a token under too small a budget leaves the matcher where it was.
  GrammarMatcher a(fresh), b(fresh);
  MaskBudget tiny(MaskLimits{.work = 1 << 10, .time = std::chrono::milliseconds(0)});
  EXPECT_FALSE(a.AcceptToken('x', tiny));
  EXPECT_TRUE(tiny.spent());
  std::vector<uint64_t> after_a, after_b;
  a.FillMask(after_a);
  b.FillMask(after_b);
  EXPECT_EQ(after_a, after_b);
}

// A request's cancel reaches its mask in flight: the job ends with CANCELLED, not after the
// whole walk.
TEST(MaskBudget, ACancelStopsAMaskInFlight) {
  auto g = CompileRegex(kCostly, Vocabulary());
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  std::atomic<bool> cancelled{true};
  MaskPrefetcher prefetcher(1);
  auto job =
      prefetcher.Start(&m, MaskLimits{.work = 0, .time = std::chrono::milliseconds(0)}, &cancelled);
  absl::StatusOr<std::vector<uint64_t>> taken = job->Take();
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kCancelled) << taken.status();
}

// A job's callback runs once its mask is ready, and Ready() agrees; a caller that must not wait
// can poll it.
TEST(MaskPrefetcher, TellsWhenAMaskIsReady) {
  auto g = CompileRegex("[a-z]{1,8}", Vocabulary());
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  MaskPrefetcher prefetcher(1);
  std::atomic<int> called{0};
  auto job = prefetcher.Start(&m, MaskLimits{}, nullptr, [&] { ++called; });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!job->Ready() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  ASSERT_TRUE(job->Ready());
  std::vector<uint64_t> own;
  m.FillMask(own);
  EXPECT_EQ(job->Take().value(), own);
  EXPECT_EQ(called.load(), 1);
}

// The warm-up runs while a request holds the cache's handle and stops once none does: a
// grammar whose last request ended before its turn is not warmed (while one queued after it,
// still in use, is), and a later request resumes it.
TEST(ConstraintCache, WarmsOnlyWhileSomeRequestUsesTheGrammar) {
  auto trie = Vocabulary();
  MaskPrefetcher prefetcher(1);
  // The one thread is held inside a job's callback until both grammars are queued.
  std::atomic<bool> release{false};
  auto blocker_grammar = CompileRegex("a", trie);
  GrammarMatcher blocker(blocker_grammar);
  auto job = prefetcher.Start(&blocker, MaskLimits{}, nullptr, [&] {
    while (!release.load()) std::this_thread::yield();
  });
  ConstraintCache cache(trie, int64_t{1} << 30, &prefetcher);
  const ConstraintSpec ended{ConstraintSpec::Kind::kRegex, "[a-z]{1,40}"};
  const CompiledGrammar* ended_grammar = nullptr;  // the cache keeps it
  int64_t to_warm = 0;
  {
    auto lease = cache.Get(ended);
    ASSERT_TRUE(lease.ok()) << lease.status();
    ended_grammar = lease->get();
    to_warm = ended_grammar->warm_remaining();
    ASSERT_GT(to_warm, 0);
  }
  auto live = cache.Get({ConstraintSpec::Kind::kRegex, "[0-9]{1,40}"});
  ASSERT_TRUE(live.ok()) << live.status();
  release = true;
  ASSERT_TRUE(job->Take().ok());
  auto warmed = [](const CompiledGrammar& g) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (g.warm_remaining() > 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    return g.warm_remaining() == 0;
  };
  ASSERT_TRUE(warmed(**live));
  EXPECT_EQ(ended_grammar->warm_remaining(), to_warm);  // its turn came first, and was skipped
  auto again = cache.Get(ended);                        // a new request: the warm-up resumes for it
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), ended_grammar);
  EXPECT_TRUE(warmed(**again));
}

// The warm-up of a grammar whose contexts run past the budget stops for good at the first such
// context.
TEST(CompiledGrammar, WarmingStopsAtAContextPastItsBudget) {
  auto trie = Vocabulary();
  auto whole = CompileRegex(kCostly, trie), bounded = CompileRegex(kCostly, trie);
  ASSERT_NE(whole, nullptr);
  int64_t all = 0, some = 0;
  while (whole->WarmNext(MaskLimits{.work = 0})) ++all;
  while (bounded->WarmNext(MaskLimits{.work = 1 << 16})) ++some;
  EXPECT_LT(some, all);
  EXPECT_EQ(bounded->warm_remaining(), 0);
  EXPECT_FALSE(bounded->WarmNext(MaskLimits{.work = 0}));  // for good
  EXPECT_LT(bounded->cached_contexts(), whole->cached_contexts());
}

}  // namespace
}  // namespace walsh
