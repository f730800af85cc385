// GenerateRequest validation in process: every refusal names its field and the allowed range.
#include "worker/server/request_validation.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace walsh {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const ValidationLimits kLimits{.vocab = 32, .max_context = 64, .max_output_tokens = 48};

v1::GenerateRequest TokensRequest(std::initializer_list<int32_t> ids) {
  v1::GenerateRequest r;
  r.mutable_tokens();  // set even when empty
  for (int32_t id : ids) r.mutable_tokens()->add_ids(id);
  return r;
}

// The refusal's message, or "" when the request was accepted.
std::string Refusal(const v1::GenerateRequest& r, const std::vector<int32_t>* prompt = nullptr,
                    int64_t emitted = 0) {
  auto v = ValidateGenerateRequest(r, kLimits, prompt, emitted);
  if (v.ok()) return "";
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(v.status().message());
}

TEST(ValidateGenerateRequest, AcceptsAndCarriesEveryField) {
  v1::GenerateRequest r = TokensRequest({1, 2, 3});
  r.mutable_sampling()->set_temperature(0.5f);
  r.mutable_sampling()->set_top_k(5);
  r.mutable_sampling()->set_top_p(0.9f);
  r.mutable_sampling()->set_seed(77);
  (*r.mutable_sampling()->mutable_logit_bias())[7] = -2.5f;
  (*r.mutable_sampling()->mutable_logit_bias())[3] = 1.0f;
  r.mutable_stopping()->set_max_tokens(10);
  r.mutable_stopping()->add_stop_token_ids(4);
  r.mutable_stopping()->set_ignore_eos(true);
  r.set_logprobs(2);
  r.set_num_speculative_tokens(2);
  auto v = ValidateGenerateRequest(r, kLimits, nullptr, 0);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->generation.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(v->seed, 77u);
  EXPECT_EQ(v->generation.sampling.seed, 77u);
  EXPECT_FLOAT_EQ(v->generation.sampling.temperature, 0.5f);
  EXPECT_EQ(v->generation.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(v->generation.sampling.top_p, 0.9f);
  EXPECT_EQ(v->generation.sampling.logprobs, 2);
  ASSERT_EQ(v->generation.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(v->generation.sampling.logit_bias[0].first, 3);  // sorted by id: deterministic
  EXPECT_EQ(v->generation.stop.max_tokens, 10);
  EXPECT_EQ(v->generation.stop.stop_ids, (std::vector<int32_t>{4}));
  EXPECT_TRUE(v->generation.stop.ignore_eos);
  EXPECT_EQ(v->speculative_tokens, 2);
  r.clear_num_speculative_tokens();
  EXPECT_EQ(ValidateGenerateRequest(r, kLimits, nullptr, 0)->speculative_tokens, -1);
}

TEST(ValidateGenerateRequest, MaxTokensDefaultsToTheSmallerOf256AndTheLimit) {
  auto v = ValidateGenerateRequest(TokensRequest({1}), kLimits, nullptr, 0);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->generation.stop.max_tokens, 48);
}

TEST(ValidateGenerateRequest, NamesTheInputThatIsMissingOrWrong) {
  EXPECT_THAT(Refusal(v1::GenerateRequest()),
              StartsWith("input: one of text, tokens, chat or pieces"));
  EXPECT_THAT(Refusal(TokensRequest({})), StartsWith("tokens.ids: must not be empty"));
  EXPECT_EQ(Refusal(TokensRequest({1, 32})), "tokens.ids[1]: 32 is outside [0, 32)");
  EXPECT_EQ(Refusal(TokensRequest({-1})), "tokens.ids[0]: -1 is outside [0, 32)");
  v1::GenerateRequest text;
  text.set_text("hello");
  EXPECT_EQ(Refusal(text), "text: this model has no tokenizer; send tokens");
  v1::GenerateRequest chat;
  chat.mutable_chat()->add_messages()->set_content("hi");
  EXPECT_THAT(Refusal(chat), StartsWith("chat: "));
  v1::GenerateRequest long_id = TokensRequest({1});
  long_id.set_request_id(std::string(129, 'x'));
  EXPECT_EQ(Refusal(long_id), "request_id: longer than 128 bytes");
}

TEST(ValidateGenerateRequest, NamesTheSamplingFieldAndItsRange) {
  auto with = [](auto set) {
    v1::GenerateRequest r = TokensRequest({1});
    set(*r.mutable_sampling());
    return Refusal(r);
  };
  EXPECT_EQ(with([](v1::SamplingParams& s) { s.set_temperature(101); }),
            "sampling.temperature: 101 is outside [0, 100]");
  EXPECT_EQ(with([](v1::SamplingParams& s) { s.set_top_p(0); }),
            "sampling.top_p: 0 is outside (0, 1]");
  EXPECT_EQ(with([](v1::SamplingParams& s) { s.set_top_k(33); }),
            "sampling.top_k: 33 is outside [0, 32]");
  EXPECT_EQ(with([](v1::SamplingParams& s) { s.set_min_p(1.5f); }),
            "sampling.min_p: 1.5 is outside [0, 1]");
  EXPECT_EQ(with([](v1::SamplingParams& s) { s.set_repetition_penalty(0); }),
            "sampling.repetition_penalty: 0 is outside (0, 10]");
  EXPECT_EQ(with([](v1::SamplingParams& s) { s.set_presence_penalty(-3); }),
            "sampling.presence_penalty: -3 is outside [-2, 2]");
  EXPECT_EQ(with([](v1::SamplingParams& s) { s.set_frequency_penalty(2.5f); }),
            "sampling.frequency_penalty: 2.5 is outside [-2, 2]");
  EXPECT_EQ(with([](v1::SamplingParams& s) { (*s.mutable_logit_bias())[40] = 1; }),
            "sampling.logit_bias: token id 40 is outside [0, 32)");
  EXPECT_EQ(with([](v1::SamplingParams& s) { (*s.mutable_logit_bias())[5] = 200; }),
            "sampling.logit_bias[5]: 200 is outside [-100, 100]");
  EXPECT_THAT(with([](v1::SamplingParams& s) { s.set_temperature(std::nanf("")); }),
              StartsWith("sampling.temperature: nan is outside"));
}

TEST(ValidateGenerateRequest, NamesTheStoppingFieldAndItsRange) {
  v1::GenerateRequest r = TokensRequest({1});
  r.mutable_stopping()->set_max_tokens(0);
  EXPECT_EQ(Refusal(r), "stopping.max_tokens: 0 is outside [1, 48]");
  r = TokensRequest({1});
  r.mutable_stopping()->add_stop("");
  EXPECT_EQ(Refusal(r), "stopping.stop[0]: must be 1 to 256 bytes");
  r = TokensRequest({1});
  for (int i = 0; i < 17; ++i) r.mutable_stopping()->add_stop("x");
  EXPECT_EQ(Refusal(r), "stopping.stop: 17 strings; at most 16");
  r = TokensRequest({1});
  r.mutable_stopping()->add_stop("x");
  EXPECT_EQ(Refusal(r), "stopping.stop: this model has no tokenizer");
  r = TokensRequest({1});
  r.mutable_stopping()->add_stop_token_ids(99);
  EXPECT_EQ(Refusal(r), "stopping.stop_token_ids[0]: 99 is outside [0, 32)");
  r = TokensRequest({1});
  r.set_logprobs(21);
  EXPECT_EQ(Refusal(r), "logprobs: 21 is outside [0, 20]");
  r = TokensRequest({1});
  r.set_num_speculative_tokens(17);
  EXPECT_EQ(Refusal(r), "num_speculative_tokens: 17 is outside [0, 16]");
}

TEST(ValidateGenerateRequest, TheContextLimitNamesWhatToShorten) {
  v1::GenerateRequest r =
      TokensRequest({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20});
  r.mutable_stopping()->set_max_tokens(45);  // 20 + 45 > 64: the outputs are what is too long
  EXPECT_THAT(Refusal(r), AllOf(StartsWith("stopping.max_tokens: "),
                                HasSubstr("exceeds the context limit of 64 tokens")));
  const std::vector<int32_t> long_prompt(64, 1);  // the prompt alone leaves no room
  r.mutable_stopping()->set_max_tokens(1);
  EXPECT_THAT(Refusal(r, &long_prompt), StartsWith("prompt: a prompt of 64 tokens"));
}

TEST(ValidateGenerateRequest, AResumeTakesItsPromptAndChecksWhatWasEmitted) {
  v1::GenerateRequest r;  // a Resume's request: its own input is ignored
  r.mutable_stopping()->set_max_tokens(4);
  const std::vector<int32_t> prompt = {5, 6};
  auto v = ValidateGenerateRequest(r, kLimits, &prompt, 3);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->generation.prompt, prompt);
  EXPECT_EQ(Refusal(r, &prompt, 4), "emitted_ids: 4 tokens were already emitted; max_tokens is 4");
}

}  // namespace
}  // namespace walsh
