// The scheduler driven directly (no gRPC transport): several threads submit at once while
// others cancel, and every request ends exactly once, the finished ones with exactly the tokens
// they get alone, and the engine's pages and slots all come back. ThreadSanitizer runs it
// (scripts/sanitize tsan).
#include "worker/server/scheduler.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "constraint/compiled_grammar.h"
#include "constraint/grammar_matcher.h"
#include "constraint/mask_prefetcher.h"
#include "constraint/regex_compiler.h"
#include "gtest/gtest.h"
#include "tests/util/eventually.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_model.h"
#include "worker/engine/solo_runner.h"
#include "worker/speculative/draft_model_drafter.h"
#include "worker/speculative/ngram_drafter.h"

namespace walsh {
namespace {

// Records what the scheduler sends one request; thread-safe like a real stream.
class RecordingSink final : public ResponseSink {
 public:
  void Started(const RequestStarted&) override {}
  void Token(const GeneratedToken& token) override {
    if (on_token) on_token();
    std::lock_guard<std::mutex> l(mu_);
    ids_.push_back(token.id);
    logprobs_.push_back(token.logprob);
  }
  std::function<void()> on_token;  // set before the request is submitted
  void Finished(const RequestFinished& finished) override {
    std::lock_guard<std::mutex> l(mu_);
    finish_reason_ = FinishReasonName(finished.reason);
    End(absl::OkStatus());
  }
  void Failed(const absl::Status& status) override {
    std::lock_guard<std::mutex> l(mu_);
    End(status);
  }
  // Waits for the end; returns the ids, the finish reason and the status.
  std::tuple<std::vector<int32_t>, std::string, absl::Status> Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return completions_ > 0; });
    return {ids_, finish_reason_, status_};
  }
  std::vector<float> logprobs() {
    std::lock_guard<std::mutex> l(mu_);
    return logprobs_;
  }
  int completions() {
    std::lock_guard<std::mutex> l(mu_);
    return completions_;
  }

 private:
  void End(const absl::Status& status) {
    ++completions_;
    status_ = status;
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> ids_;
  std::vector<float> logprobs_;
  std::string finish_reason_;
  absl::Status status_;
  int completions_ = 0;
};

class SchedulerFixture {
 public:
  SchedulerFixture() {
    auto model = SyntheticModel::Create({.preset = "tiny", .seed = 21});
    EXPECT_TRUE(model.ok());
    vocab_ = (*model)->preset().config.vocab_size;
    path_ = dir_.File("m.gguf");
    EXPECT_TRUE((*model)->WritePacked(path_).ok());
  }
  std::unique_ptr<Engine> MakeEngine() {
    auto file = LoadModelFile(path_);
    EXPECT_TRUE(file.ok());
    auto bound = Model::Bind(std::move(*file));
    EXPECT_TRUE(bound.ok());
    auto engine = Engine::Create(std::move(*bound), {});
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  }
  // A draft model's runner, without prefix caching.
  std::unique_ptr<SoloRunner> MakeDraftRunner() {
    auto runner = SoloRunner::Create(MakeEngine(), {.kv_pages = kPages, .prefix_caching = false});
    EXPECT_TRUE(runner.ok()) << runner.status();
    return std::move(*runner);
  }
  static constexpr int64_t kPages = 96;  // few enough that long requests preempt each other
  int64_t vocab() const { return vocab_; }
  // A request for `max_tokens` tokens after `prompt`, or after a prompt made from the seed.
  std::shared_ptr<ActiveRequest> Request(uint64_t seed, int64_t max_tokens,
                                         std::shared_ptr<RecordingSink> sink,
                                         std::vector<int32_t> prompt = {}) const {
    auto r = std::make_shared<ActiveRequest>();
    r->request_id = "r" + std::to_string(seed);
    r->arrived_at = Clock::now();
    std::mt19937 gen(static_cast<uint32_t>(seed));
    GenerationRequest g;
    g.prompt = std::move(prompt);
    for (int i = 0; g.prompt.empty() && i < 8 + static_cast<int>(seed % 24); ++i)
      g.prompt.push_back(static_cast<int32_t>(gen() % vocab_));
    g.sampling.temperature = 0.8f;
    g.sampling.seed = seed;
    g.stop.max_tokens = max_tokens;
    g.stop.ignore_eos = true;
    r->prompt = g.prompt;
    r->seed = seed;
    r->generation = std::make_unique<Generation>(nullptr, g);
    r->sink = std::move(sink);
    return r;
  }

 private:
  testing::TempDir dir_;
  std::string path_;
  int64_t vocab_ = 0;
};

// An engine and a scheduler on it (which plans its memory: SchedulerFixture::kPages pages), with
// the metrics they write.
struct Serving {
  explicit Serving(std::unique_ptr<Engine> e, const SchedulerOptions& options = {})
      : engine(std::move(e)), metrics(registry) {
    auto created =
        Scheduler::Create(engine.get(), {.kv_pages = SchedulerFixture::kPages}, options, &metrics);
    EXPECT_TRUE(created.ok()) << created.status();
    if (created.ok()) scheduler = *std::move(created);
    pages = scheduler->cache_size().pages;
    page_size = scheduler->cache_size().page_size;
  }
  std::unique_ptr<Engine> engine;
  MetricsRegistry registry;
  WorkerMetrics metrics;
  std::unique_ptr<Scheduler> scheduler;
  int64_t pages = 0, page_size = 0;
};

TEST(Scheduler, ConcurrentSubmitsAndCancelsEndEveryRequestOnceAndFreeEverything) {
  SchedulerFixture fx;
  constexpr int kThreads = 4, kPerThread = 12;
  auto max_tokens = [](uint64_t seed) { return static_cast<int64_t>(4 + seed % 29); };

  // Each request alone first: what a finished request must have produced.
  std::map<uint64_t, std::vector<int32_t>> alone;
  {
    Serving served(fx.MakeEngine());
    for (uint64_t seed = 0; seed < kThreads * kPerThread; ++seed) {
      auto sink = std::make_shared<RecordingSink>();
      ASSERT_TRUE(served.scheduler->Submit(fx.Request(seed, max_tokens(seed), sink)).ok());
      alone[seed] = std::get<0>(sink->Wait());
    }
  }

  Serving served(fx.MakeEngine(), {.max_batch_tokens = 64, .max_running = 6});
  std::mutex mu;
  std::vector<std::pair<std::shared_ptr<ActiveRequest>, std::shared_ptr<RecordingSink>>> all;
  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      std::mt19937 gen(t);
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t seed = static_cast<uint64_t>(t * kPerThread + i);
        auto sink = std::make_shared<RecordingSink>();
        auto r = fx.Request(seed, max_tokens(seed), sink);
        if (i == 0) r->cancelled = true;  // cancelled before it is submitted: certainly cancelled
        ASSERT_TRUE(served.scheduler->Submit(r).ok());
        {
          std::lock_guard<std::mutex> l(mu);
          all.emplace_back(r, sink);
        }
        if (gen() % 3 == 0) {  // cancel a third of them, some at once, some a little later
          std::this_thread::sleep_for(std::chrono::microseconds(gen() % 3000));
          r->cancelled = true;
          served.scheduler->Wake();
        }
        (void)served.scheduler->Load();  // read concurrently with the steps
      }
    });
  }
  for (auto& s : submitters) s.join();

  int finished = 0, cancelled = 0;
  for (auto& [r, sink] : all) {
    auto [ids, reason, status] = sink->Wait();
    if (reason == "length") {
      ++finished;
      EXPECT_TRUE(status.ok());
      EXPECT_EQ(ids, alone[r->seed]) << r->request_id;
    } else {
      ++cancelled;
      EXPECT_TRUE(r->cancelled.load())
          << r->request_id << " ended '" << reason << "' " << status.message();
    }
  }
  testing::Eventually(
      [&] { return served.scheduler->Load().running + served.scheduler->Load().waiting == 0; },
      std::chrono::seconds(2), std::chrono::milliseconds(10));
  for (auto& [r, sink] : all) EXPECT_EQ(sink->completions(), 1) << r->request_id;
  const SchedulerLoad load = served.scheduler->Load();
  EXPECT_EQ(load.running, 0);
  EXPECT_EQ(load.waiting, 0);
  EXPECT_EQ(load.engine.kv_pages_used, 0);
  EXPECT_EQ(load.engine.state_slots_used, 0);
  EXPECT_GT(finished, 0);
  EXPECT_GE(cancelled, kThreads);
}

// Sinks are called with the scheduler's mutex released: one that asks the scheduler for its
// load on every token (a client thread's call) neither deadlocks nor waits for a step.
TEST(Scheduler, SinksRunOutsideTheSchedulersLock) {
  SchedulerFixture fx;
  Serving served(fx.MakeEngine());
  auto sink = std::make_shared<RecordingSink>();
  int loads = 0;
  sink->on_token = [&] {
    (void)served.scheduler->Load();
    ++loads;
  };
  ASSERT_TRUE(served.scheduler->Submit(fx.Request(5, 6, sink)).ok());
  const auto [ids, reason, status] = sink->Wait();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(ids.size(), 6u);
  EXPECT_EQ(loads, 6);
}

// A request whose tokens need more KV pages than the whole cache is refused as soon as it
// reaches the head of the queue, even while others run (waiting could never help it), and the
// queue goes on.
TEST(Scheduler, ARequestThatCanNeverFitIsRefusedAtOnce) {
  SchedulerFixture fx;
  Serving served(fx.MakeEngine());
  const int64_t pages = served.pages, page = served.page_size;
  auto running_sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(served.scheduler->Submit(fx.Request(1, 64, running_sink)).ok());

  auto huge_sink = std::make_shared<RecordingSink>();
  auto huge = fx.Request(2, 4, huge_sink);
  huge->prompt.assign(static_cast<size_t>(pages * page), 1);  // and the token it samples: +1 page
  ASSERT_TRUE(served.scheduler->Submit(huge).ok());
  auto after_sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(served.scheduler->Submit(fx.Request(3, 4, after_sink)).ok());

  const auto [ids, reason, status] = huge_sink->Wait();
  EXPECT_TRUE(ids.empty());
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "the request's " + std::to_string(pages * page) +
                                  " tokens need more KV cache than the worker has (" +
                                  std::to_string(pages) + " pages of " + std::to_string(page) +
                                  " tokens)");
  EXPECT_EQ(std::get<1>(after_sink->Wait()), "length");
  EXPECT_EQ(std::get<1>(running_sink->Wait()), "length");
}

// A request that fits when admitted but, running alone, outgrows the whole pool as it
// generates ends with RESOURCE_EXHAUSTED naming the cache, after the tokens that fitted.
TEST(Scheduler, ALoneRequestThatOutgrowsThePoolEndsNamingTheCache) {
  SchedulerFixture fx;
  Serving served(fx.MakeEngine());
  const int64_t pages = served.pages, page = served.page_size;
  auto sink = std::make_shared<RecordingSink>();
  const int64_t prompt = pages * page - 8;
  ASSERT_TRUE(
      served.scheduler->Submit(fx.Request(4, 20, sink, std::vector<int32_t>(prompt, 5))).ok());
  const auto [ids, reason, status] = sink->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "the request outgrew the KV cache (" +
                                                      std::to_string(pages) + " pages of " +
                                                      std::to_string(page) + " tokens)"))
      << status.message();
  // Positions 0 .. pages * page - 1 fit: the prompt's, and those of 8 sampled tokens.
  EXPECT_EQ(static_cast<int64_t>(ids.size()), 9);
  EXPECT_EQ(served.metrics.preemptions.value(), 0);
}

// Requests that share a cached document share its pages at once: admission counts the pages a
// hit shares with running sequences once, and reserves what each running request still needs.
// The 1,000-token document takes 63 of the 96 pages, so counting it in full for every request
// would run them one at a time; counted once, three questions run together, and each gets
// exactly the tokens it gets alone on a cold engine.
TEST(Scheduler, DocumentRequestsSharingCachedPagesRunTogether) {
  SchedulerFixture fx;
  std::vector<int32_t> document;
  for (int i = 0; i < 1000; ++i) document.push_back(static_cast<int32_t>(7 + (i * 13) % 200));
  auto question = [&](int q) {
    std::vector<int32_t> p = document;
    for (int i = 0; i < 5 + q; ++i) p.push_back(static_cast<int32_t>(300 + q * 11 + i));
    return p;
  };
  std::map<int, std::vector<int32_t>> alone;
  for (int q = 2; q < 5; ++q) {
    Serving served(fx.MakeEngine());
    auto sink = std::make_shared<RecordingSink>();
    ASSERT_TRUE(served.scheduler->Submit(fx.Request(q, 8, sink, question(q))).ok());
    alone[q] = std::get<0>(sink->Wait());
  }

  Serving served(fx.MakeEngine());
  // The first question computes the document; the second snapshots where it branches off.
  for (int q = 0; q < 2; ++q) {
    auto sink = std::make_shared<RecordingSink>();
    ASSERT_TRUE(served.scheduler->Submit(fx.Request(q, 1, sink, question(q))).ok());
    ASSERT_TRUE(std::get<2>(sink->Wait()).ok());
  }
  std::atomic<int64_t> most_running{0};
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int q = 2; q < 5; ++q) {
    auto sink = std::make_shared<RecordingSink>();
    sink->on_token = [&] {
      const int64_t running = served.scheduler->Load().running;
      int64_t seen = most_running.load();
      while (running > seen && !most_running.compare_exchange_weak(seen, running)) {
      }
    };
    sinks.push_back(sink);
  }
  for (int q = 2; q < 5; ++q) {
    ASSERT_TRUE(served.scheduler->Submit(fx.Request(q, 8, sinks[q - 2], question(q))).ok());
  }
  for (int q = 2; q < 5; ++q) {
    const auto [ids, reason, status] = sinks[q - 2]->Wait();
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(ids, alone[q]) << "question " << q;
  }
  EXPECT_EQ(most_running.load(), 3);
  EXPECT_EQ(served.metrics.preemptions.value(), 0);
}

// Requests for the speculative tests: prompts that repeat themselves (so that prompt lookup
// drafts something), greedy for odd seeds and seeded sampling for even ones.
struct SpeculativeRun {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};
std::vector<int32_t> RepeatingPrompt(uint64_t seed) {
  std::vector<int32_t> p;
  for (int rep = 0; rep < 3; ++rep) {
    for (int i = 0; i < 9; ++i) p.push_back(static_cast<int32_t>(11 + seed * 7 + i * 3));
  }
  return p;
}
std::shared_ptr<ActiveRequest> SpeculativeRequest(const SchedulerFixture& fx, uint64_t seed,
                                                  std::shared_ptr<RecordingSink> sink) {
  auto r =
      fx.Request(seed, 20 + static_cast<int64_t>(seed), std::move(sink), RepeatingPrompt(seed));
  GenerationRequest g = r->generation->request();
  g.sampling.temperature = seed % 2 ? 0.0f : 0.7f;
  r->generation = std::make_unique<Generation>(nullptr, g);
  return r;
}
// Runs `seeds` at once and checks each streamed the tokens and logprobs of `plain` bit for bit
// (when given); returns what they streamed.
std::map<uint64_t, SpeculativeRun> RunSpeculative(
    const SchedulerFixture& fx, Serving& served, const std::vector<uint64_t>& seeds,
    const std::map<uint64_t, SpeculativeRun>& plain = {},
    const std::function<void(ActiveRequest&)>& adjust = {}) {
  std::map<uint64_t, std::shared_ptr<RecordingSink>> sinks;
  for (uint64_t seed : seeds) {
    sinks[seed] = std::make_shared<RecordingSink>();
    auto r = SpeculativeRequest(fx, seed, sinks[seed]);
    if (adjust) adjust(*r);
    EXPECT_TRUE(served.scheduler->Submit(r).ok());
  }
  std::map<uint64_t, SpeculativeRun> got;
  for (uint64_t seed : seeds) {
    const auto [ids, reason, status] = sinks[seed]->Wait();
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(reason, "length");
    got[seed] = {ids, sinks[seed]->logprobs()};
    if (!plain.count(seed)) continue;
    const SpeculativeRun& want = plain.at(seed);
    EXPECT_EQ(ids, want.ids) << "request " << seed;
    EXPECT_EQ(got[seed].logprobs.size(), want.logprobs.size());
    if (got[seed].logprobs.size() == want.logprobs.size()) {
      EXPECT_EQ(0, std::memcmp(got[seed].logprobs.data(), want.logprobs.data(),
                               want.logprobs.size() * sizeof(float)))
          << "request " << seed;
    }
  }
  return got;
}
// What plain decoding streams for each seed, one request at a time.
std::map<uint64_t, SpeculativeRun> PlainRuns(SchedulerFixture& fx,
                                             const std::vector<uint64_t>& seeds) {
  Serving served(fx.MakeEngine());
  std::map<uint64_t, SpeculativeRun> plain;
  for (uint64_t seed : seeds) plain.merge(RunSpeculative(fx, served, {seed}));
  return plain;
}
const std::vector<uint64_t> kSpeculativeSeeds = {0, 1, 2, 3, 4, 5};

// Speculative decoding verifies n-gram drafts in the decode step and keeps what the model itself
// samples: every request streams exactly the tokens and logprobs it streams with speculation
// off, greedy or seeded, alone or batched, whatever k; and the drafts are both accepted and
// rejected along the way.
TEST(Scheduler, SpeculationGivesExactlyThePlainTokensAndLogprobs) {
  SchedulerFixture fx;
  const auto plain = PlainRuns(fx, kSpeculativeSeeds);
  for (int64_t k : {1, 3, 5}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    NgramDrafter ngram({.max_tokens = k});
    Serving served(fx.MakeEngine(), {.speculative_tokens = k, .drafter = &ngram});
    RunSpeculative(fx, served, kSpeculativeSeeds, plain);
    const double drafted = served.metrics.spec_draft_tokens.value();
    const double accepted = served.metrics.spec_accepted_tokens.value();
    EXPECT_GT(served.metrics.spec_drafts.value(), 0);
    EXPECT_GT(accepted, 0);
    EXPECT_LT(accepted, drafted);  // some drafts were wrong: the rollback ran
    const SchedulerLoad load = served.scheduler->Load();
    EXPECT_EQ(load.engine.state_slots_used, 0);  // the planes went back
  }
}

// The target model as its own draft model is a drafter that is always right where the target
// decodes greedily: every greedy draft is accepted, and mixed with seeded requests (whose
// samples the greedy draft often misses, so the draft model's checkpoints are restored) every
// request still streams the plain tokens and logprobs. The draft engine's sequences go with
// their requests.
TEST(Scheduler, TheTargetAsItsOwnDraftModelIsAlwaysRightWhenGreedy) {
  SchedulerFixture fx;
  const auto plain = PlainRuns(fx, kSpeculativeSeeds);
  for (int64_t k : {1, 3}) {  // k = 5 and every acceptance pattern: draft_model_drafter_test.cc
    SCOPED_TRACE("k = " + std::to_string(k));
    std::unique_ptr<Engine> target = fx.MakeEngine();
    auto drafter = DraftModelDrafter::Create(fx.MakeDraftRunner(), target->model(),
                                             target->max_context(), 512);
    ASSERT_TRUE(drafter.ok()) << drafter.status();
    {
      Serving greedy(fx.MakeEngine(), {.speculative_tokens = k, .drafter = drafter->get()});
      RunSpeculative(fx, greedy, {1, 3, 5}, plain);
      EXPECT_GT(greedy.metrics.spec_drafts.value(), 0);
      EXPECT_EQ(greedy.metrics.spec_accepted_tokens.value(),
                greedy.metrics.spec_draft_tokens.value());
    }
    EXPECT_EQ((*drafter)->sequences(), 0);
    Serving mixed(std::move(target), {.speculative_tokens = k, .drafter = drafter->get()});
    RunSpeculative(fx, mixed, kSpeculativeSeeds, plain);
    EXPECT_LT(mixed.metrics.spec_accepted_tokens.value(), mixed.metrics.spec_draft_tokens.value());
  }
}

// Proposes, for every position, a token other than the one plain decoding streams there.
class AlwaysWrongDrafter final : public Drafter {
 public:
  AlwaysWrongDrafter(const std::map<uint64_t, SpeculativeRun>& plain, int64_t vocab)
      : vocab_(vocab) {
    for (const auto& [seed, run] : plain) outputs_[RepeatingPrompt(seed)] = run.ids;
  }
  std::vector<std::vector<int32_t>> Draft(absl::Span<const DraftRequest> requests) override {
    std::vector<std::vector<int32_t>> out(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      for (const auto& [prompt, ids] : outputs_) {
        if (requests[i].tokens.size() <= prompt.size() ||
            !std::equal(prompt.begin(), prompt.end(), requests[i].tokens.begin())) {
          continue;
        }
        for (size_t p = requests[i].tokens.size() - prompt.size();
             p < ids.size() && static_cast<int64_t>(out[i].size()) < requests[i].max_tokens; ++p) {
          out[i].push_back(static_cast<int32_t>((ids[p] + 1) % vocab_));
        }
      }
    }
    return out;
  }
  void Forget(uint64_t) override {}

 private:
  int64_t vocab_;
  std::map<std::vector<int32_t>, std::vector<int32_t>> outputs_;
};

// A drafter that is always wrong: nothing is accepted, every rollback runs, the output is the
// plain one. With a minimum acceptance rate the requests back off and draft far less often.
TEST(Scheduler, AnAlwaysWrongDrafterChangesNothingAndBacksOff) {
  SchedulerFixture fx;
  const auto plain = PlainRuns(fx, kSpeculativeSeeds);
  AlwaysWrongDrafter wrong(plain, fx.vocab());
  double drafts_without_backoff = 0;
  for (double min_acceptance : {0.0, 0.5}) {
    SCOPED_TRACE("min acceptance " + std::to_string(min_acceptance));
    Serving served(
        fx.MakeEngine(),
        {.speculative_tokens = 3, .speculative_min_acceptance = min_acceptance, .drafter = &wrong});
    RunSpeculative(fx, served, kSpeculativeSeeds, plain);
    EXPECT_GT(served.metrics.spec_draft_tokens.value(), 0);
    EXPECT_EQ(served.metrics.spec_accepted_tokens.value(), 0);
    if (min_acceptance == 0) {
      drafts_without_backoff = served.metrics.spec_drafts.value();
    } else {
      EXPECT_LT(served.metrics.spec_drafts.value(), drafts_without_backoff / 2);
    }
  }
}

// A request's own limit: 0 drafts nothing, 1 drafts one token per step, whatever the worker's.
TEST(Scheduler, ARequestCapsItsOwnDrafts) {
  SchedulerFixture fx;
  const auto plain = PlainRuns(fx, {1});
  AlwaysWrongDrafter wrong(plain, fx.vocab());
  for (int64_t cap : {0, 1}) {
    Serving served(fx.MakeEngine(), {.speculative_tokens = 3, .drafter = &wrong});
    RunSpeculative(fx, served, {1}, plain, [&](ActiveRequest& r) { r.speculative_tokens = cap; });
    EXPECT_EQ(served.metrics.spec_draft_tokens.value(), cap * served.metrics.spec_drafts.value());
    EXPECT_EQ(served.metrics.spec_drafts.value() > 0, cap > 0);
  }
}

// A constrained request whose mask is not ready when its logits are (here the one mask thread is
// held busy) waits with them while another request runs to its end; once the thread is free the
// constrained one goes on, with exactly the tokens it gets with masks computed after each pass.
TEST(Scheduler, AMaskNotReadyHoldsUpOnlyItsOwnRequest) {
  SchedulerFixture fx;
  std::vector<std::string> tokens;
  for (int64_t id = 0; id < fx.vocab(); ++id) {
    tokens.push_back(id < 256
                         ? std::string(1, static_cast<char>(id))
                         : absl::StrCat(std::string(1, static_cast<char>('a' + id % 26)), id % 10));
  }
  auto grammar = RegexGrammar("[a-z][a-z0-9]{1,40}");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  auto compiled =
      std::make_shared<const CompiledGrammar>(*grammar, std::make_shared<const TokenTrie>(tokens));
  const auto constrained = [&](std::shared_ptr<RecordingSink> sink) {
    auto r = fx.Request(7, 6, sink);
    GenerationRequest g = r->generation->request();
    g.constraint = compiled;
    g.cancelled = &r->cancelled;
    r->generation = std::make_unique<Generation>(nullptr, g);
    return r;
  };
  std::vector<int32_t> after_the_pass;
  {
    Serving served(fx.MakeEngine());
    auto sink = std::make_shared<RecordingSink>();
    ASSERT_TRUE(served.scheduler->Submit(constrained(sink)).ok());
    after_the_pass = std::get<0>(sink->Wait());
    ASSERT_EQ(after_the_pass.size(), 6u);
  }

  MaskPrefetcher prefetcher(1);
  std::atomic<bool> release{false};
  auto blocker_grammar = RegexGrammar("a");
  ASSERT_TRUE(blocker_grammar.ok());
  GrammarMatcher blocker(std::make_shared<const CompiledGrammar>(
      *blocker_grammar, std::make_shared<const TokenTrie>(tokens)));
  auto held = prefetcher.Start(&blocker, MaskLimits{}, nullptr, [&] {
    while (!release.load()) std::this_thread::yield();
  });
  Serving served(fx.MakeEngine(), {.mask_prefetcher = &prefetcher});
  auto waiting = std::make_shared<RecordingSink>();
  auto plain = std::make_shared<RecordingSink>();
  ASSERT_TRUE(served.scheduler->Submit(constrained(waiting)).ok());
  ASSERT_TRUE(served.scheduler->Submit(fx.Request(8, 12, plain)).ok());
  auto [plain_ids, reason, status] = plain->Wait();
  EXPECT_EQ(plain_ids.size(), 12u);
  EXPECT_EQ(waiting->completions(), 0);
  EXPECT_TRUE(waiting->logprobs().empty()) << "sampled before its mask was ready";
  EXPECT_GE(served.metrics.constraint_deferred.value(), 1);
  release = true;
  EXPECT_EQ(std::get<0>(waiting->Wait()), after_the_pass);
  EXPECT_TRUE(held->Take().ok());
}

}  // namespace
}  // namespace walsh
