// Text out: stop strings across token boundaries, UTF-8 streaming, the tokenizer's special
// tokens and pre-tokenizer variants, ChatML, and walsh-run end to end on the tiny preset.
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/weights_memory.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_model.h"
#include "worker/engine/chat_format.h"
#include "worker/engine/detokenizer.h"
#include "worker/engine/stop_checker.h"
#include "worker/model/byte_unicode.h"
#include "worker/model/model_file.h"
#include "worker/model/tokenizer.h"
#include "worker/model/utf8.h"

namespace walsh {
namespace {

class TinyModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    auto m = SyntheticModel::Create({.preset = "tiny"});
    ASSERT_TRUE(m.ok());
    path_ = dir_->File("tiny.gguf");
    ASSERT_TRUE((*m)->WritePacked(path_).ok());
    auto f = LoadModelFile(path_);
    ASSERT_TRUE(f.ok());
    file_ = new ModelFile(std::move(*f));
    tok_ = Tokenizer::FromGguf(*file_->gguf)->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete file_;
    delete dir_;
  }
  static testing::TempDir* dir_;
  static std::string path_;
  static ModelFile* file_;
  static Tokenizer* tok_;
};
testing::TempDir* TinyModel::dir_ = nullptr;
std::string TinyModel::path_;
ModelFile* TinyModel::file_ = nullptr;
Tokenizer* TinyModel::tok_ = nullptr;

TEST(StopChecker, StopStringAcrossTokenBoundariesIsNotEmitted) {
  StopChecker s({.max_tokens = 100, .stop_strings = {"STOP", "\n\n"}});
  std::string sent;
  for (const char* piece : {"Hello ", "wor", "ld S", "T", "O"}) {
    const auto step = s.Add(1, piece);
    sent += step.text;
    ASSERT_EQ(step.finish, FinishReason::kNone) << piece;
  }
  EXPECT_EQ(sent, "Hello world ");  // "STO" is held back: it may become STOP
  const auto end = s.Add(1, "P and more");
  EXPECT_EQ(end.finish, FinishReason::kStop);
  EXPECT_EQ(end.matched, "STOP");
  EXPECT_EQ(sent + end.text, "Hello world ");
}

TEST(StopChecker, HeldTextIsReleasedWhenItCannotMatch) {
  StopChecker s({.max_tokens = 100, .stop_strings = {"STOP"}});
  EXPECT_EQ(s.Add(1, "ST").text, "");
  EXPECT_EQ(s.Add(1, "AR").text, "STAR");
}

TEST(StopChecker, EosStopIdsAndLength) {
  StopChecker eos({.max_tokens = 100, .eos_ids = {7}});
  EXPECT_EQ(eos.Add(3, "a").finish, FinishReason::kNone);
  const auto e = eos.Add(7, "<|im_end|>");
  EXPECT_EQ(e.finish, FinishReason::kStop);
  EXPECT_EQ(e.text, "");
  StopChecker ignore({.max_tokens = 2, .eos_ids = {7}, .ignore_eos = true});
  EXPECT_EQ(ignore.Add(7, "x").finish, FinishReason::kNone);
  EXPECT_EQ(ignore.Add(7, "y").finish, FinishReason::kLength);
  StopChecker ids({.max_tokens = 10, .stop_ids = {9}});
  EXPECT_EQ(ids.Add(9, "z").matched, "9");
}

TEST(Utf8, StreamingNeverSplitsACharacter) {
  EXPECT_EQ(CompleteUtf8Prefix("ab\xe2\x82"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xe2\x82\xac"), 5u);
  EXPECT_EQ(CompleteUtf8Prefix("\xf0\x9f\x98"), 0u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xff"), 2u);  // never completable: let it through
  EXPECT_EQ(SanitizeUtf8("a\xff"
                         "b\xe2\x82"),
            "a\xef\xbf\xbd"
            "b\xef\xbf\xbd");
  EXPECT_EQ(SanitizeUtf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

TEST_F(TinyModel, DetokenizerEmitsOnlyWholeCharacters) {
  // "€" is 3 bytes; feed it as three single-byte tokens.
  StreamingDetokenizer d(*tok_);
  const std::string euro = "\xe2\x82\xac";
  std::vector<std::string> pieces;
  for (unsigned char c : euro) pieces.push_back(d.Add(tok_->FindToken(ByteToUnicode(c))));
  EXPECT_EQ(pieces, (std::vector<std::string>{"", "", euro}));
  // Control tokens produce no text.
  EXPECT_EQ(d.Add(tok_->FindToken("<|im_end|>")), "");
  EXPECT_EQ(d.Flush(), "");
}

TEST_F(TinyModel, TokenizerRoundTripsAndMatchesSpecialTokens) {
  for (const std::string text : {"Hello world, it's 2026!", "  spaces\n\n and\ttabs ", "日本語 ü é",
                                 "emoji 🚀 done", "x=1;\ny = x ** 2"}) {
    EXPECT_EQ(tok_->Decode(tok_->Encode(text)), text);
  }
  const std::vector<int32_t> ids = tok_->Encode("<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(ids.front(), tok_->FindToken("<|im_start|>"));
  EXPECT_EQ(ids.back(), tok_->FindToken("<|im_end|>"));
  // Without special parsing the same text is plain bytes.
  EXPECT_GT(tok_->Encode("<|im_end|>", false).size(), 1u);
  EXPECT_EQ(tok_->pre(), "qwen35");
  EXPECT_FALSE(tok_->add_bos());
  EXPECT_NE(
      std::find(tok_->eos_ids().begin(), tok_->eos_ids().end(), tok_->FindToken("<|im_end|>")),
      tok_->eos_ids().end());
  // Merges apply: fewer tokens than bytes, and a frequent word of the corpus is one token.
  EXPECT_LT(tok_->Encode(" the quick brown fox").size(), 20u);
  EXPECT_EQ(tok_->Encode(" the").size(), 1u);
}

TEST_F(TinyModel, Qwen35SplitKeepsCombiningMarksWithLetters) {
  // qwen35 letter runs include marks (\p{M}); qwen2's do not (docs/format.md §9).
  const std::string ki = "\xe0\xa4\x95\xe0\xa4\xbf";  // Devanagari KA + vowel sign I (Mc)
  EXPECT_EQ(tok_->Split(" " + ki + "!"), (std::vector<std::string>{" " + ki, "!"}));
  auto m = SyntheticModel::Create({.preset = "tiny"});
  ASSERT_TRUE(m.ok());
  (*m)->mutable_writer().SetKv("tokenizer.ggml.pre", GgufValue::String("qwen2"));
  ASSERT_TRUE((*m)->WritePacked(dir_->File("qwen2.gguf")).ok());
  auto f = LoadModelFile(dir_->File("qwen2.gguf"));
  ASSERT_TRUE(f.ok());
  auto qwen2 = Tokenizer::FromGguf(*f->gguf);
  ASSERT_TRUE(qwen2.ok());
  EXPECT_EQ((*qwen2)->Split(" " + ki + "!"),
            (std::vector<std::string>{" \xe0\xa4\x95", "\xe0\xa4\xbf!"}));
  // NFC first: e + combining acute is one letter.
  EXPECT_EQ(tok_->Split("cafe\xcc\x81 x"), (std::vector<std::string>{"caf\xc3\xa9", " x"}));
  // Contractions, digits one by one, whitespace runs.
  EXPECT_EQ(tok_->Split("it's 123  go"),
            (std::vector<std::string>{"it", "'s", " ", "1", "2", "3", " ", " go"}));
  (*m)->mutable_writer().SetKv("tokenizer.ggml.pre", GgufValue::String("llama3"));
  ASSERT_TRUE((*m)->WritePacked(dir_->File("llama3.gguf")).ok());
  auto l3 = LoadModelFile(dir_->File("llama3.gguf"));
  ASSERT_TRUE(l3.ok());
  auto refused = Tokenizer::FromGguf(*l3->gguf);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tokenizer.ggml.pre"), std::string::npos);
}

TEST(ChatFormat, ChatMlWithThinkingOnAndOff) {
  auto msgs = ParseChatMessagesJson(
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}])");
  ASSERT_TRUE(msgs.ok());
  EXPECT_EQ(*FormatChatMl(*msgs, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(*FormatChatMl(*msgs, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  auto bad = ParseChatMessagesJson(R"([{"role":"user"}])");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("messages[0].content"), std::string::npos);
  EXPECT_FALSE(FormatChatMl({{"robot", "x"}}, false).ok());
}

// Tool results render as the Qwen template renders them (consecutive results in one user turn),
// not as a turn of a "tool" role the model was never trained on.
TEST(ChatFormat, ToolResultsAreToolResponsesOfAUserTurn) {
  auto prompt = FormatChatMl(
      {{"user", "Weather?"}, {"assistant", "Checking."}, {"tool", "22 C"}, {"tool", "noon"}}, true);
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt,
            "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\nChecking.<|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n22 C\n</tool_response>\n<tool_response>\nnoon\n"
            "</tool_response><|im_end|>\n<|im_start|>assistant\n");
}

// --weights-memory: the copy in huge pages reads the same bytes as the mapped file, so every
// logit is the same; where the machine has no THP, `hugepages` is refused naming the flag.
TEST_F(TinyModel, WalshRunWeightsInHugePagesGiveTheSameLogits) {
  using testing::RunProcess;
  auto logits_with = [&](const char* memory) {
    const std::string out = dir_->File(std::string("logits-") + memory + ".f32");
    const auto r =
        RunProcess({WALSH_RUN_BIN, "--model", path_, "--tokens", "1,2,3,4,5", "--max-tokens", "0",
                    "--output", "ids", "--logits-out", out, "--weights-memory", memory});
    return std::make_pair(r, r.exit_code == 0 ? testing::ReadFileOrDie(out) : std::string());
  };
  const auto mapped = logits_with("mmap");
  ASSERT_EQ(mapped.first.exit_code, 0) << mapped.first.err;
  const auto chosen = logits_with("auto");
  ASSERT_EQ(chosen.first.exit_code, 0) << chosen.first.err;
  EXPECT_EQ(chosen.second, mapped.second);
  const auto huge = logits_with("hugepages");
  const bool offered = ChooseWeightsMemory(WeightsMemory::kHugePages,
                                           testing::ReadFileOrDie(path_).size(), ReadHostMemory())
                           .ok();
  if (offered) {
    ASSERT_EQ(huge.first.exit_code, 0) << huge.first.err;
    EXPECT_EQ(huge.second, mapped.second);
  } else {
    EXPECT_NE(huge.first.exit_code, 0);
    EXPECT_NE(huge.first.err.find("--weights-memory hugepages: "), std::string::npos)
        << huge.first.err;
  }
  const auto bad = logits_with("bogus");
  EXPECT_NE(bad.first.exit_code, 0);
  EXPECT_NE(bad.first.err.find("--weights-memory must be auto, hugepages, hugetlb or mmap"),
            std::string::npos)
      << bad.first.err;
  // A reserved hugetlbfs pool: the same logits where one holds the file, else a refusal naming
  // the flag and the pools.
  const auto pool = logits_with("hugetlb");
  if (ChooseWeightsMemory(WeightsMemory::kHugetlb, testing::ReadFileOrDie(path_).size(),
                          ReadHostMemory())
          .ok()) {
    ASSERT_EQ(pool.first.exit_code, 0) << pool.first.err;
    EXPECT_EQ(pool.second, mapped.second);
  } else {
    EXPECT_NE(pool.first.exit_code, 0);
    EXPECT_NE(pool.first.err.find("--weights-memory hugetlb: no hugetlbfs pool has room"),
              std::string::npos)
        << pool.first.err;
  }
}

// --mlock: the weights locked at load give the same logits; with cuda it is refused by name.
TEST_F(TinyModel, WalshRunMlockLocksTheWeights) {
  using testing::RunProcess;
  const std::string out = dir_->File("logits-locked.f32"), plain = dir_->File("logits-plain.f32");
  const auto r = RunProcess({WALSH_RUN_BIN, "--model", path_, "--tokens", "1,2,3", "--max-tokens",
                             "0", "--output", "ids", "--logits-out", out, "--mlock"});
  if (r.exit_code != 0) {
    // A memlock limit below the model's size without CAP_IPC_LOCK: refused, naming both.
    EXPECT_NE(r.err.find("--mlock: cannot lock"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("RLIMIT_MEMLOCK"), std::string::npos) << r.err;
    return;
  }
  const auto p = RunProcess({WALSH_RUN_BIN, "--model", path_, "--tokens", "1,2,3", "--max-tokens",
                             "0", "--output", "ids", "--logits-out", plain});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(testing::ReadFileOrDie(out), testing::ReadFileOrDie(plain));
  const auto gpu =
      RunProcess({WALSH_RUN_BIN, "--model", path_, "--tokens", "1", "--device", "cuda", "--mlock"});
  EXPECT_NE(gpu.exit_code, 0);
  EXPECT_NE(gpu.err.find("--mlock is for --device cpu"), std::string::npos) << gpu.err;
}

TEST_F(TinyModel, WalshRunEndToEnd) {
  using testing::RunProcess;
  const auto text = RunProcess({WALSH_RUN_BIN, "--model", path_, "--prompt", "The quick brown fox",
                                "--max-tokens", "12", "--ignore-eos"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.err.find("generated 12 tokens"), std::string::npos) << text.err;
  const auto ids = RunProcess({WALSH_RUN_BIN, "--model", path_, "--prompt", "The quick brown fox",
                               "--max-tokens", "12", "--ignore-eos", "--output", "ids"});
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  std::vector<int32_t> got;
  for (absl::string_view p : absl::StrSplit(absl::StripAsciiWhitespace(ids.out), ',')) {
    got.push_back(std::stoi(std::string(p)));
  }
  ASSERT_EQ(got.size(), 12u);
  // The streamed text is the decoding of the streamed ids (control tokens aside).
  std::string decoded;
  for (int32_t id : got) {
    if (!tok_->IsControl(id)) decoded += tok_->TokenBytes(id);
  }
  EXPECT_EQ(text.out, SanitizeUtf8(decoded) + "\n");
  // Same tokens when the prompt is given as ids; seeded sampling repeats itself.
  const std::vector<int32_t> prompt = tok_->Encode("The quick brown fox");
  const auto by_ids =
      RunProcess({WALSH_RUN_BIN, "--model", path_, "--tokens", absl::StrJoin(prompt, ","),
                  "--max-tokens", "12", "--ignore-eos", "--output", "ids"});
  EXPECT_EQ(by_ids.out, ids.out);
  const std::vector<std::string> seeded = {
      WALSH_RUN_BIN,   "--model", path_,    "--prompt", "Hi",           "--max-tokens", "10",
      "--temperature", "0.9",     "--seed", "42",       "--ignore-eos", "--output",     "ids"};
  EXPECT_EQ(RunProcess(seeded).out, RunProcess(seeded).out);
  // Logits of every prompt position, in the fixtures' format.
  const std::string logits = dir_->File("logits.f32");
  const auto lo = RunProcess({WALSH_RUN_BIN, "--model", path_, "--tokens", "1,2,3,4,5",
                              "--max-tokens", "0", "--output", "ids", "--logits-out", logits});
  ASSERT_EQ(lo.exit_code, 0) << lo.err;
  EXPECT_EQ(testing::ReadFileOrDie(logits).size(), 5u * file_->config.vocab_size * 4);
  // JSON output ends with the finish reason; a stop string ends the stream.
  const auto js = RunProcess({WALSH_RUN_BIN, "--model", path_, "--messages",
                              R"([{"role":"user","content":"hello"}])", "--max-tokens", "5",
                              "--output", "json", "--logprobs", "3"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const std::string last_line = js.out.substr(js.out.rfind('{'));
  const nlohmann::json fin = nlohmann::json::parse(last_line);
  EXPECT_TRUE(fin["finish_reason"] == "length" || fin["finish_reason"] == "stop");
  // Errors a user can act on.
  const auto missing =
      RunProcess({WALSH_RUN_BIN, "--model", dir_->File("nope.gguf"), "--prompt", "x"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("nope.gguf"), std::string::npos);
  const auto usage = RunProcess({WALSH_RUN_BIN, "--model", path_});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("--prompt"), std::string::npos);
  const auto bad_tok = RunProcess({WALSH_RUN_BIN, "--model", path_, "--tokens", "1,99999"});
  EXPECT_EQ(bad_tok.exit_code, 3);
  EXPECT_NE(bad_tok.err.find("99999"), std::string::npos) << bad_tok.err;
  // Sampling flags take a request's ranges (common/request_ranges.h).
  const auto penalty =
      RunProcess({WALSH_RUN_BIN, "--model", path_, "--prompt", "x", "--repetition-penalty", "0"});
  EXPECT_EQ(penalty.exit_code, 2);
  EXPECT_NE(penalty.err.find("--repetition-penalty must be in (0, 10] (got 0)"), std::string::npos)
      << penalty.err;
  const auto top_p = RunProcess({WALSH_RUN_BIN, "--model", path_, "--prompt", "x", "--top-p", "0"});
  EXPECT_EQ(top_p.exit_code, 2);
  EXPECT_NE(top_p.err.find("--top-p must be in (0, 1]"), std::string::npos) << top_p.err;
}

TEST_F(TinyModel, WalshRunOnCudaGeneratesOrSaysWhyNot) {
  using testing::RunProcess;
  const auto cuda = RunProcess({WALSH_RUN_BIN, "--model", path_, "--prompt", "Hi", "--max-tokens",
                                "4", "--output", "ids", "--device", "cuda"});
  if (cuda.exit_code == 0) {  // a GPU answered: its tokens are the CPU's
    const auto cpu = RunProcess({WALSH_RUN_BIN, "--model", path_, "--prompt", "Hi", "--max-tokens",
                                 "4", "--output", "ids"});
    EXPECT_EQ(cuda.out, cpu.out);
    return;
  }
  EXPECT_EQ(cuda.exit_code, 1) << cuda.err;
  EXPECT_TRUE(cuda.err.find("--device cuda: no CUDA device is available") != std::string::npos ||
              cuda.err.find("--device cuda: this build has no CUDA backend") != std::string::npos)
      << cuda.err;
  const auto bad =
      RunProcess({WALSH_RUN_BIN, "--model", path_, "--prompt", "Hi", "--device", "tpu"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--device must be cpu or cuda"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace walsh
