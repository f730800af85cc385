// Structured output through a real worker: outputs checked by validators walsh shares no code
// with (ajv over the JSON Schema Test Suite, ECMAScript RegExp, a separate grammar parser),
// refusals that name the field, Resume that rebuilds the constraint's state, and neither
// speculative decoding nor masks computed during the forward pass change a constrained output.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/gateway_fixture.h"
#include "tests/integration/worker_fixture.h"
#include "tests/util/eventually.h"

namespace walsh {
namespace {

using testing::RunGenerate;
using testing::RunProcess;
using testing::StreamResult;
using testing::WorkerProcess;

const std::string kSource = WALSH_SOURCE_DIR;

v1::GenerateRequest Constrained(const std::string& schema, uint64_t seed, uint32_t max_tokens) {
  v1::GenerateRequest r;
  r.set_text("Answer:");
  r.mutable_sampling()->set_temperature(1.0f);
  r.mutable_sampling()->set_seed(seed);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.set_json_schema(schema);
  return r;
}

TEST(StructuredOutput, IndependentValidatorsAcceptEveryOutput) {
  WorkerProcess w;
  ASSERT_TRUE(w.ok());
  const auto r = RunProcess({WALSH_NODE_BIN, kSource + "/tests/node/structured_output_check.mjs",
                             w.target(), kSource + "/proto", kSource + "/tests/protos",
                             kSource + "/tests/data/json-schema-test-suite/draft2020-12"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  // Schemas: each is refused naming what it does not support, or every output that ended
  // parses and validates. Outputs cut by max_tokens are counted and kept rare.
  EXPECT_GE(j["accepted"].get<int>(), 200) << "refused: " << j["refused"].dump(1);
  EXPECT_EQ(j["invalid"].size(), 0u) << j["invalid"].dump(1);
  EXPECT_EQ(j["unparsed"].size(), 0u) << j["unparsed"].dump(1);
  EXPECT_LE(j["length"].get<int>() * 20, j["accepted"].get<int>()) << "over 5% cut by length";
  for (const auto& refused : j["refused"]) {
    const std::string error = refused["error"];
    EXPECT_EQ(error.rfind("INVALID_ARGUMENT json_schema: ", 0), 0u) << refused.dump();
  }
  // The two schemas ajv itself cannot load (they name remote meta-schemas).
  for (const auto& x : j["ajv_cannot_compile"]) {
    EXPECT_EQ(x["where"].get<std::string>().rfind("vocabulary.json", 0), 0u) << x.dump();
  }
  EXPECT_LE(j["ajv_cannot_compile"].size(), 2u);
  EXPECT_EQ(j["regex"]["invalid"].size(), 0u) << j["regex"].dump(1);
  EXPECT_EQ(j["regex"]["stop"].get<int>(), 3 * j["regex"]["patterns"].get<int>());
  EXPECT_EQ(j["grammar"]["invalid"].size(), 0u) << j["grammar"].dump(1);
  EXPECT_GE(j["grammar"]["stop"].get<int>(), 20);
}

TEST(StructuredOutput, RefusalsNameTheFieldAndWhatIsWrong) {
  WorkerProcess w;
  ASSERT_TRUE(w.ok());
  auto stub = w.Generator();
  auto expect_refused = [&](v1::GenerateRequest r, const std::string& message) {
    const StreamResult s = RunGenerate(*stub, r);
    EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << message;
    EXPECT_NE(s.status.error_message().find(message), std::string::npos)
        << s.status.error_message();
  };
  expect_refused(Constrained(R"({"type":"object","properties":{"a":{"multipleOf":3}}})", 1, 8),
                 "json_schema: at /properties/a: 'multipleOf' is not supported");
  expect_refused(Constrained(R"({"type":)", 1, 8), "json_schema: not valid JSON");
  v1::GenerateRequest r = Constrained("{}", 1, 8);
  r.set_regex("a(?=b)");
  expect_refused(r, "regex: at offset 3: lookaround assertions are not supported");
  r.set_grammar("root ::= item\n");
  expect_refused(r, "grammar: rule 'item' is used but not defined");
  r.set_json_object(false);
  expect_refused(r, "json_object: must be true when set");
  r.set_json_object(true);
  r.mutable_stopping()->set_ignore_eos(true);
  expect_refused(r, "stopping.ignore_eos: cannot be set with a constraint");
  r.mutable_stopping()->set_ignore_eos(false);
  r.set_regex(std::string(70000, 'a'));
  expect_refused(r, "regex: 70000 bytes; at most 65536");
  // The same worker still serves a good one.
  r.set_json_object(true);
  const StreamResult ok = RunGenerate(*stub, r);
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
}

// Hostile constraints (docs/structured_output.md §Bounds): one whose automaton would explode is
// refused at compile, naming the field; one that compiles but whose masks run past the worker's
// work budget ends with RESOURCE_EXHAUSTED naming the flag, and the worker serves the next
// request as before.
TEST(StructuredOutput, HostileConstraintsAreRefusedOrBoundedNeverAStall) {
  WorkerProcess w({"--constraint-mask-work", "65536"});
  ASSERT_TRUE(w.ok());
  auto stub = w.Generator();
  v1::GenerateRequest r = Constrained(R"({"type":"string","pattern":"^(.?){2000}.{2000}$"})", 1, 8);
  StreamResult s = RunGenerate(*stub, r);
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.status.error_message().rfind("json_schema: ", 0), 0u) << s.status.error_message();
  EXPECT_NE(s.status.error_message().find("can begin more than 512 ways"), std::string::npos);
  r.set_regex("(.?){100}.{100}");
  s = RunGenerate(*stub, r);
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.status.error_message().rfind("regex: ", 0), 0u) << s.status.error_message();

  r.set_regex("(.?){30}.{30}");
  s = RunGenerate(*stub, r);
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.status.error_message();
  EXPECT_NE(s.status.error_message().find("--constraint-mask-work"), std::string::npos)
      << s.status.error_message();
  EXPECT_TRUE(w.WaitForMetric("walsh_worker_constraint_exhausted_total", 1));
  // Through a gateway, the same answer, and no retry: another worker would do the same work.
  WorkerProcess w2({"--constraint-mask-work", "65536"});
  ASSERT_TRUE(w2.ok());
  testing::GatewayProcess gw({w.target(), w2.target()});
  ASSERT_TRUE(gw.WaitForWorkers(2));
  const StreamResult routed = RunGenerate(*gw.Stub(), r);
  EXPECT_EQ(routed.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << routed.status.error_message();
  EXPECT_EQ(gw.Metric("walsh_gateway_retries_total").value_or(-1), 0);

  r.set_regex("[a-z]{1,6}");
  s = RunGenerate(*stub, r);
  EXPECT_TRUE(s.status.ok()) << s.status.error_message();
}

// A constrained stream resumed at any index continues exactly; emitted ids the constraint
// forbids are refused, naming the index.
TEST(StructuredOutput, ResumeRebuildsTheConstraintFromTheEmittedTokens) {
  WorkerProcess w, w2;
  ASSERT_TRUE(w.ok() && w2.ok());
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
          "tags":{"type":"array","items":{"enum":["a","bc"]},"maxItems":4}},
          "required":["name","tags"]})";
  const v1::GenerateRequest req = Constrained(schema, 4242, 200);
  const StreamResult full = RunGenerate(*w.Generator(), req);
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  ASSERT_EQ(full.finish_reason, "stop");
  ASSERT_TRUE(nlohmann::json::accept(full.text)) << full.text;
  grpc::ClientContext tctx;
  v1::TokenizeRequest tr;
  tr.set_text(req.text());
  v1::TokenizeResponse prompt;
  ASSERT_TRUE(w2.Generator()->Tokenize(&tctx, tr, &prompt).ok());
  auto resume = [&](const std::vector<int32_t>& emitted, std::vector<int32_t>& rest) {
    v1::ResumeRequest rr;
    *rr.mutable_request() = req;
    *rr.mutable_prompt_ids() = prompt.ids();
    for (int32_t id : emitted) rr.add_emitted_ids(id);
    grpc::ClientContext ctx;
    auto reader = w2.Worker()->Resume(&ctx, rr);
    v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
      for (const auto& t : resp.tokens().tokens()) rest.push_back(t.id());
    }
    return reader->Finish();
  };
  for (size_t k : {size_t{1}, full.ids.size() / 2, full.ids.size() - 1}) {
    std::vector<int32_t> rest;
    const grpc::Status s =
        resume(std::vector<int32_t>(full.ids.begin(), full.ids.begin() + k), rest);
    ASSERT_TRUE(s.ok()) << "resume at " << k << ": " << s.error_message();
    EXPECT_EQ(rest, std::vector<int32_t>(full.ids.begin() + k, full.ids.end())) << k;
  }
  // '}' cannot start the object: the first emitted id is refused by index.
  grpc::ClientContext c;
  v1::TokenizeRequest brace;
  brace.set_text("}");
  v1::TokenizeResponse brace_ids;
  ASSERT_TRUE(w2.Generator()->Tokenize(&c, brace, &brace_ids).ok());
  std::vector<int32_t> rest;
  const grpc::Status bad = resume({brace_ids.ids(0)}, rest);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("emitted_ids[0]: token"), std::string::npos)
      << bad.error_message();
}

// Drafted tokens are checked against one mask per position: the outputs of a speculating
// worker equal a plain one's, constrained or not.
TEST(StructuredOutput, SpeculationChangesNoConstrainedOutput) {
  WorkerProcess plain, speculating({"--speculative", "ngram", "--num-speculative-tokens", "4"});
  ASSERT_TRUE(plain.ok() && speculating.ok());
  for (uint64_t seed : {1, 2, 3}) {
    v1::GenerateRequest r = Constrained("{}", seed, 120);
    r.set_text(R"({"a": [1, 2, 3], "b": [1, 2, 3], "c": [1, 2, 3], "d": [1, 2)");
    r.set_grammar("root ::= \"[\" item (\", \" item)* \"]\"\nitem ::= [0-9] | \"x\"");
    r.mutable_sampling()->set_temperature(0.0f);
    const StreamResult a = RunGenerate(*plain.Generator(), r);
    const StreamResult b = RunGenerate(*speculating.Generator(), r);
    ASSERT_TRUE(a.status.ok() && b.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.ids, b.ids) << seed;
    EXPECT_EQ(a.text, b.text);
  }
  // And drafts were made and checked.
  const std::string metrics = testing::HttpGet(speculating.metrics_port(), "/metrics");
  const std::string name = "\nvllm:spec_decode_num_draft_tokens_total ";
  const size_t at = metrics.find(name);
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(metrics.substr(at + name.size())), 0) << metrics.substr(at, 60);
}

// Masks computed on other threads while the forward pass runs, for a batch of concurrent
// constrained streams sharing grammars, give the outputs of masks computed after it.
TEST(StructuredOutput, MaskThreadsChangeNoOutput) {
  WorkerProcess after({"--constraint-threads", "0"}), during({"--constraint-threads", "3"});
  ASSERT_TRUE(after.ok() && during.ok());
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array",)"
      R"("items":{"enum":["a","b"]}}},"required":["name","tags"]})";
  std::vector<v1::GenerateRequest> requests;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    requests.push_back(Constrained(seed % 2 == 0 ? schema : "{}", seed, 60));
    if (seed % 3 == 0) requests.back().set_json_object(true);
  }
  auto run_all = [&](WorkerProcess& w) {
    std::vector<StreamResult> results(requests.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < requests.size(); ++i) {
      clients.emplace_back([&, i] { results[i] = RunGenerate(*w.Generator(), requests[i]); });
    }
    for (std::thread& t : clients) t.join();
    return results;
  };
  const std::vector<StreamResult> a = run_all(after), b = run_all(during);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(a[i].status.ok() && b[i].status.ok())
        << a[i].status.error_message() << b[i].status.error_message();
    EXPECT_FALSE(a[i].ids.empty());
    EXPECT_EQ(a[i].ids, b[i].ids) << "request " << i;
  }
}

// The value of `series` (name and labels, as exposed) in a worker's /metrics; -1 when absent.
double MetricValue(WorkerProcess& w, const std::string& series) {
  return testing::MetricIn(testing::HttpGet(w.metrics_port(), "/metrics"), series).value_or(-1);
}

// A schema the worker has not seen is compiled once and its masks warmed by the mask threads
// while a request uses it (docs/structured_output.md §Warm-up), as its metrics show; once none
// does, nothing is left warming; a second request hits the cache and finds its contexts there.
TEST(StructuredOutput, NewConstraintsAreWarmedOnTheMaskThreads) {
  WorkerProcess w({"--constraint-threads", "2"});
  ASSERT_TRUE(w.ok());
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},)"
      R"("n":{"type":"integer","minimum":0,"maximum":99}},"required":["name","n"]})";
  const StreamResult first = RunGenerate(*w.Generator(), Constrained(schema, 1, 40));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  // Warm-up stops with the last request that uses the grammar: soon nothing is warming.
  double warming = -1;
  testing::Eventually(
      [&] {
        warming = MetricValue(w, "walsh_worker_constraint_contexts{state=\"warming\"}");
        return warming == 0;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(50));
  EXPECT_EQ(warming, 0);
  const double cached = MetricValue(w, "walsh_worker_constraint_contexts{state=\"cached\"}");
  EXPECT_GT(cached, 20) << "the warm-up computed the schema's contexts";
  EXPECT_EQ(MetricValue(w, "walsh_worker_constraint_cache_entries"), 1);
  EXPECT_GT(MetricValue(w, "walsh_worker_constraint_cache_bytes"), 0);
  EXPECT_EQ(MetricValue(w, "walsh_worker_constraint_cache_lookups_total{outcome=\"miss\"}"), 1);
  const StreamResult second = RunGenerate(*w.Generator(), Constrained(schema, 2, 40));
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(MetricValue(w, "walsh_worker_constraint_cache_lookups_total{outcome=\"hit\"}"), 1);
  EXPECT_GE(MetricValue(w, "walsh_worker_constraint_contexts{state=\"cached\"}"), cached);
}

TEST(StructuredOutput, MaskThreadsFlagIsCheckedByName) {
  for (const char* bad : {"-1", "65"}) {
    WorkerProcess w({"--constraint-threads", bad});
    EXPECT_FALSE(w.ok()) << bad;
    w.process().Wait(std::chrono::seconds(10));
    const std::string err = w.process().stderr_text();
    EXPECT_NE(err.find("--constraint-threads must be 0..64"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace walsh
