// Admission without a socket: one test per rule of frontend/admission.h, each on a parsed
// request and the facts of a small model, checking the error code, the field the message
// names, and what an admitted request asks of the engine.
#include "frontend/admission.h"
#include "frontend/dialects.h"

#include <gtest/gtest.h>

namespace hearth {
namespace {

ModelFacts facts() {
  ModelFacts f;
  f.model_names = {"stories", "default"};
  f.context = 64;
  f.vocab_size = 512;
  f.stop_ids = {2};
  f.n_slots = 4;
  f.grammar_bytes = 4096;
  f.tool_format = ToolCallFormat::kHermes;
  f.single_bytes.set_range(0, 255);
  return f;
}

ApiRequest parse(std::string_view extra, ApiEndpoint endpoint = ApiEndpoint::kCompletions) {
  const std::string head = endpoint == ApiEndpoint::kCompletions
                               ? R"({"prompt": "x")"
                               : R"({"messages": [{"role": "user", "content": "x"}])";
  const std::string body = head + (extra.empty() ? "" : ", ") + std::string(extra) + "}";
  auto r = api_parse_request(body, endpoint);
  EXPECT_TRUE(r.is_ok()) << body << ": " << r.status().message();
  return std::move(r).value();
}

std::vector<int32_t> prompt(size_t n) { return std::vector<int32_t>(n, 7); }

// The code, and the field the message starts with.
void expect_refused(const Result<Admission>& a, ErrorCode code, std::string_view field) {
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), code) << a.status().message();
  EXPECT_TRUE(a.status().message().starts_with(field)) << a.status().message();
}

TEST(AdmissionTest, TheModelMustBeOneThisServerServes) {
  EXPECT_TRUE(admit_model(parse(""), facts()).is_ok());  // no model: the default
  EXPECT_TRUE(admit_model(parse(R"("model": "default")"), facts()).is_ok());
  const Status st = admit_model(parse(R"("model": "gpt-4")"), facts());
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find("\"stories\", \"default\""), std::string::npos) << st.message();
}

TEST(AdmissionTest, AnEmptyPromptIsRefused) {
  expect_refused(admit(parse(""), {}, facts(), 1), ErrorCode::kInvalidArgument, "prompt");
}

TEST(AdmissionTest, ThePromptMustLeaveRoomForOneToken) {
  expect_refused(admit(parse(""), prompt(64), facts(), 1), ErrorCode::kInvalidArgument, "prompt");
  auto a = admit(parse(R"("max_tokens": 1)"), prompt(63), facts(), 1);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->submit.spec.max_tokens, 1);
}

TEST(AdmissionTest, MaxTokensDefaultsTo16ForCompletionsAndTheRoomLeftForChat) {
  auto c = admit(parse(""), prompt(10), facts(), 1);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->submit.spec.max_tokens, 16);
  auto chat = admit(parse("", ApiEndpoint::kChatCompletions), prompt(10), facts(), 1);
  ASSERT_TRUE(chat.is_ok()) << chat.status().message();
  EXPECT_EQ(chat->submit.spec.max_tokens, 54);
}

TEST(AdmissionTest, MaxTokensMustFitTheRoomThePromptLeaves) {
  expect_refused(admit(parse(R"("max_tokens": 55)"), prompt(10), facts(), 1), ErrorCode::kInvalidArgument,
                 "max_tokens");
  EXPECT_TRUE(admit(parse(R"("max_tokens": 54)"), prompt(10), facts(), 1).is_ok());
  // Messages and Responses: an upper bound, cut to the room.
  auto messages = messages_parse_request(R"({"max_tokens": 32000, "messages": [{"role": "user", "content": "hi"}]})", false);
  ASSERT_TRUE(messages.is_ok()) << messages.status().to_string();
  auto cut = admit(*messages, prompt(10), facts(), 1);
  ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
  EXPECT_EQ(cut->submit.spec.max_tokens, 54);
  auto responses = responses_parse_request(R"({"input": "hi", "max_output_tokens": 9999})");
  ASSERT_TRUE(responses.is_ok()) << responses.status().to_string();
  EXPECT_EQ(admit(*responses, prompt(10), facts(), 1)->submit.spec.max_tokens, 54);
}

// The parse refuses min_tokens over a max_tokens given; admission, over the default.
TEST(AdmissionTest, MinTokensMustNotExceedMaxTokens) {
  expect_refused(admit(parse(R"("min_tokens": 17)"), prompt(3), facts(), 1), ErrorCode::kInvalidArgument,
                 "min_tokens");
  auto a = admit(parse(R"("max_tokens": 4, "min_tokens": 4)"), prompt(3), facts(), 1);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->submit.spec.min_tokens, 4);
}

TEST(AdmissionTest, LogitBiasIdsMustBeInTheVocabulary) {
  expect_refused(admit(parse(R"("logit_bias": {"512": 1})"), prompt(3), facts(), 1), ErrorCode::kOutOfRange,
                 "logit_bias");
  auto a = admit(parse(R"("logit_bias": {"511": -100})"), prompt(3), facts(), 1);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  ASSERT_EQ(a->submit.spec.logit_bias.size(), 1u);
  EXPECT_EQ(a->submit.spec.logit_bias[0].id, 511);
  EXPECT_EQ(a->submit.spec.logit_bias[0].bias, -100.0f);
}

TEST(AdmissionTest, StopTokenIdsMustBeInTheVocabulary) {
  expect_refused(admit(parse(R"("stop_token_ids": [600])"), prompt(3), facts(), 1), ErrorCode::kOutOfRange,
                 "stop_token_ids");
}

TEST(AdmissionTest, StopTokenIdsMergeWithTheModelsOwnWithoutDuplicates) {
  auto a = admit(parse(R"("stop_token_ids": [2, 9, 9, 13])"), prompt(3), facts(), 1);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->submit.spec.stop_ids, (std::vector<int32_t>{2, 9, 13}));
}

TEST(AdmissionTest, StopIdsBeyondWhatASlotHoldsAreRefused) {
  ModelFacts f = facts();
  for (int32_t id = 100; f.stop_ids.size() < static_cast<size_t>(kMaxStopIds); ++id) f.stop_ids.push_back(id);
  EXPECT_TRUE(admit(parse(R"("stop_token_ids": [2])"), prompt(3), f, 1).is_ok());  // already the model's
  expect_refused(admit(parse(R"("stop_token_ids": [3])"), prompt(3), f, 1), ErrorCode::kInvalidArgument,
                 "stop_token_ids");
}

TEST(AdmissionTest, AConstraintBecomesTheGrammarOrIsRefusedNamingItsField) {
  auto a = admit(parse(R"("response_format": {"type": "json_object"})", ApiEndpoint::kChatCompletions), prompt(3),
                 facts(), 1);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_FALSE(a->submit.spec.grammar.empty());
  EXPECT_TRUE(admit(parse(""), prompt(3), facts(), 1)->submit.spec.grammar.empty());
  expect_refused(admit(parse(R"("guided_regex": "(")"), prompt(3), facts(), 1), ErrorCode::kInvalidArgument,
                 "guided_regex");
  ModelFacts small = facts();
  small.grammar_bytes = 8;
  EXPECT_FALSE(
      admit(parse(R"("response_format": {"type": "json_object"})", ApiEndpoint::kChatCompletions), prompt(3), small, 1)
          .is_ok());
}

TEST(AdmissionTest, ChoicesNeedAsManySlots) {
  auto a = admit(parse(R"("n": 4)"), prompt(3), facts(), 1);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->samples, 4);
  expect_refused(admit(parse(R"("n": 5)"), prompt(3), facts(), 1), ErrorCode::kInvalidArgument, "n:");
  auto best = admit(parse(R"("n": 2, "best_of": 3)"), prompt(3), facts(), 1);
  ASSERT_TRUE(best.is_ok()) << best.status().message();
  EXPECT_EQ(best->samples, 3);
  expect_refused(admit(parse(R"("best_of": 5)"), prompt(3), facts(), 1), ErrorCode::kInvalidArgument, "best_of");
}

TEST(AdmissionTest, TheSeedIsTheRequestsOrTheOneGiven) {
  EXPECT_EQ(admit(parse(R"("seed": 42)"), prompt(3), facts(), 7)->submit.spec.sampling.seed, 42u);
  EXPECT_EQ(admit(parse(""), prompt(3), facts(), 7)->submit.spec.sampling.seed, 7u);
}

TEST(AdmissionTest, TheSpecCarriesTheRequestsSamplingAndLogprobs) {
  auto a = admit(parse(R"("temperature": 0.5, "top_k": 3, "logprobs": 2, "ignore_eos": true)"), prompt(3), facts(), 1);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->submit.spec.sampling.temperature, 0.5f);
  EXPECT_EQ(a->submit.spec.sampling.top_k, 3);
  EXPECT_EQ(a->submit.spec.top_logprobs, 2);
  EXPECT_TRUE(a->submit.spec.ignore_stop);
  EXPECT_EQ(a->submit.prompt, prompt(3));
  EXPECT_EQ(admit(parse(""), prompt(3), facts(), 1)->submit.spec.top_logprobs, 0);  // no logprobs
}

TEST(AdmissionTest, ToolCallsAreParsedOnlyWhenToolsMayBeCalled) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "now"}}])";
  auto with = admit(parse(tools, ApiEndpoint::kChatCompletions), prompt(3), facts(), 1);
  ASSERT_TRUE(with.is_ok()) << with.status().message();
  EXPECT_EQ(with->tool_format, ToolCallFormat::kHermes);
  auto none = admit(parse(tools + R"(, "tool_choice": "none")", ApiEndpoint::kChatCompletions), prompt(3), facts(), 1);
  ASSERT_TRUE(none.is_ok()) << none.status().message();
  EXPECT_EQ(none->tool_format, ToolCallFormat::kNone);
}

// The one validate every hop shares: the same codes at the frontend and at the engine.
TEST(RequestSpecTest, OneValidateWithOneSetOfCodes) {
  const RequestLimits limits{.vocab_size = 10, .grammar_bytes = 4};
  EXPECT_TRUE(request_spec_validate({.max_tokens = 3, .stop_ids = {9}}, limits).is_ok());
  EXPECT_EQ(request_spec_validate({.stop_ids = {10}}, limits).code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(request_spec_validate({.logit_bias = {{.id = -1, .bias = 1}}}, limits).code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(request_spec_validate({.logit_bias = {{.id = 1, .bias = 101}}}, limits).code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(request_spec_validate({.max_tokens = -1}, limits).code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(request_spec_validate({.min_tokens = -1}, limits).code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(request_spec_validate({.top_logprobs = kMaxTopLogprobs + 1}, limits).code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(request_spec_validate({.sampling = {.temperature = -1}}, limits).code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(request_spec_validate({.grammar = "root"}, limits).code(), ErrorCode::kOk);
  EXPECT_EQ(request_spec_validate({.grammar = "root "}, limits).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(request_spec_validate({.stop_ids = std::vector<int32_t>(kMaxStopIds + 1, 1)}, limits).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(request_spec_validate({.logit_bias = std::vector<LogitBias>(kMaxLogitBias + 1)}, limits).code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace hearth
