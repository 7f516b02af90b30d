// Request parsing and validation for the OpenAI endpoints: every known field maps to the engine's
// parameters, wrong types and out-of-range values are 400s naming the field, unknown fields are ignored.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>

#include "server/api_error.h"
#include "server/request_parser.h"
#include "test_server_fake_engine.h"

namespace kvserve::server {
namespace {

using nlohmann::json;
using testing::FakeEngine;

ApiRequest parse_completion(const std::string& body) { return parse_api_request(Endpoint::Completions, body); }
ApiRequest parse_chat(const std::string& body) { return parse_api_request(Endpoint::ChatCompletions, body); }

// The status and param of the ApiError that f throws ({0, ""} when it throws none).
template <typename F>
std::pair<int, std::string> api_rejection(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return {e.status(), e.param()};
  }
  return {0, ""};
}
std::pair<int, std::string> rejection(Endpoint endpoint, const std::string& body) {
  return api_rejection([&] { parse_api_request(endpoint, body); });
}

TEST(ServerParse, CompletionFieldsMapToSamplingParams) {
  const ApiRequest r = parse_completion(R"({
    "model": "m", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
    "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
    "seed": 42, "stop": ["\n", "END"], "n": 3, "logprobs": 2, "stream": true,
    "stream_options": {"include_usage": true}, "user": "u1", "cache_salt": "tenant-a",
    "some_future_field": {"nested": [1, 2]}
  })");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "Hello");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.1f);
  EXPECT_TRUE(r.params.has_seed);
  EXPECT_EQ(r.params.seed, 42u);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.user, "u1");
  EXPECT_EQ(r.cache_salt, "tenant-a");
}

TEST(ServerParse, DefaultsAndNullsMeanNotGiven) {
  const ApiRequest r = parse_completion(
      R"({"prompt": "x", "max_tokens": null, "temperature": null, "stop": null, "logprobs": null, "seed": null})");
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.params.temperature, 1.0f);  // OpenAI's default
  EXPECT_FLOAT_EQ(parse_completion(R"({"prompt": "x", "temperature": 0})").params.temperature, 0.0f);
  EXPECT_TRUE(r.params.stop.empty());
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(r.params.logprobs, 0);
  EXPECT_FALSE(r.params.has_seed);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
}

TEST(ServerParse, PromptAsTokenIdsStringsAndLists) {
  const ApiRequest ids = parse_completion(R"({"prompt": [1, 2, 3]})");
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(ids.prompt_batch.empty());
  const ApiRequest batch = parse_completion(R"({"prompt": ["only one"]})");
  EXPECT_EQ(batch.prompt_text, "only one");
  EXPECT_TRUE(batch.prompt_batch.empty());
  const ApiRequest nested = parse_completion(R"({"prompt": [[5, 6]]})");
  EXPECT_EQ(nested.prompt_ids, (std::vector<int32_t>{5, 6}));
  // A list of prompts, as OpenAI's and vLLM's completions take it: strings, or lists of ids, in order.
  const ApiRequest two = parse_completion(R"({"prompt": ["a", "bc"], "n": 2})");
  ASSERT_EQ(two.prompt_batch.size(), 2u);
  EXPECT_EQ(two.prompt_batch[0].text, "a");
  EXPECT_EQ(two.prompt_batch[1].text, "bc");
  EXPECT_FALSE(two.prompt_batch[1].is_ids);
  EXPECT_EQ(two.n, 2);
  const ApiRequest two_ids = parse_completion(R"({"prompt": [[5, 6], [7]]})");
  ASSERT_EQ(two_ids.prompt_batch.size(), 2u);
  EXPECT_TRUE(two_ids.prompt_batch[0].is_ids);
  EXPECT_EQ(two_ids.prompt_batch[0].ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(two_ids.prompt_batch[1].ids, (std::vector<int32_t>{7}));
  for (const std::string body : {R"({"prompt": [1, "b"]})", R"({"prompt": []})", R"({"prompt": ["a", 1]})",
                                 R"({"prompt": ["a", []]})", R"({"prompt": [["a"]]})", R"({"prompt": [[1], [1.5]]})",
                                 R"({"prompt": ["a", ["b"]]})", R"({"prompt": [{"text": "a"}]})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(rejection(Endpoint::Completions, body), std::make_pair(400, std::string("prompt")));
  }
  json many = {{"prompt", json::array()}};
  for (int i = 0; i <= kMaxBatchChoices; ++i) many["prompt"].push_back("x");
  EXPECT_EQ(rejection(Endpoint::Completions, many.dump()), std::make_pair(400, std::string("prompt")));
  many["prompt"].erase(many["prompt"].begin());
  EXPECT_EQ(parse_completion(many.dump()).prompt_batch.size(), static_cast<size_t>(kMaxBatchChoices));
  many["n"] = 2;  // 64 prompts x 2 choices
  EXPECT_EQ(rejection(Endpoint::Completions, many.dump()), std::make_pair(400, std::string("n")));
  EXPECT_EQ(rejection(Endpoint::Completions, R"({"max_tokens": 3})"), std::make_pair(400, std::string("prompt")));
}

TEST(ServerParse, StopAsStringOrArray) {
  EXPECT_EQ(parse_completion(R"({"prompt": "x", "stop": "###"})").params.stop, (std::vector<std::string>{"###"}));
  EXPECT_EQ(rejection(Endpoint::Completions, R"({"prompt": "x", "stop": 5})"), std::make_pair(400, std::string("stop")));
  EXPECT_EQ(rejection(Endpoint::Completions, R"({"prompt": "x", "stop": ["a", 1]})").first, 400);
}

TEST(ServerParse, ChatMessagesAndLogprobs) {
  const ApiRequest r = parse_chat(R"({
    "messages": [{"role": "developer", "content": "be brief"},
                 {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
                 {"role": "assistant", "content": null}],
    "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 9, "max_tokens": 100
  })");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "hi there");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.params.max_tokens, 9);  // max_completion_tokens wins

  // logprobs without alternatives still needs the engine to report the chosen token's logprob.
  EXPECT_EQ(parse_chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})").params.logprobs, 1);
  EXPECT_EQ(rejection(Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"),
            std::make_pair(400, std::string("top_logprobs")));
  EXPECT_EQ(rejection(Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})"),
            std::make_pair(400, std::string("logprobs")));
  EXPECT_EQ(rejection(Endpoint::ChatCompletions, R"({"messages": []})").first, 400);
  // chat_template_kwargs (vLLM's, llama-server's): an object of extra template variables.
  EXPECT_TRUE(r.chat_template_kwargs.is_null());
  const ApiRequest k = parse_chat(
      R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": false}})");
  EXPECT_EQ(k.chat_template_kwargs, nlohmann::ordered_json({{"enable_thinking", false}}));
  EXPECT_EQ(rejection(Endpoint::ChatCompletions,
                      R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]})"),
            std::make_pair(400, std::string("chat_template_kwargs")));
  // reasoning_effort (OpenAI's; gpt-oss's template reads it): a template variable; the kwargs' own value wins.
  EXPECT_EQ(parse_chat(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "high"})")
                .chat_template_kwargs,
            nlohmann::ordered_json({{"reasoning_effort", "high"}}));
  EXPECT_EQ(parse_chat(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "low",
                           "chat_template_kwargs": {"reasoning_effort": "medium", "x": 1}})")
                .chat_template_kwargs,
            nlohmann::ordered_json({{"reasoning_effort", "medium"}, {"x", 1}}));
  EXPECT_EQ(rejection(Endpoint::ChatCompletions,
                      R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "max"})"),
            std::make_pair(400, std::string("reasoning_effort")));
  EXPECT_EQ(rejection(Endpoint::ChatCompletions, R"({"messages": [{"role": "wizard", "content": "x"}]})").first, 400);
  EXPECT_EQ(rejection(Endpoint::ChatCompletions, R"({"messages": [{"content": "x"}]})").first, 400);
  EXPECT_EQ(rejection(Endpoint::ChatCompletions, R"({"messages": "hello"})").first, 400);
}

TEST(ServerParse, MalformedJsonAndWrongTypesAre400) {
  EXPECT_EQ(rejection(Endpoint::Completions, "{not json").first, 400);
  EXPECT_EQ(rejection(Endpoint::Completions, "[1, 2]").first, 400);
  EXPECT_EQ(rejection(Endpoint::Completions, "").first, 400);
  // Numbers beyond a double are the JSON parser's out_of_range, not its parse_error (found by fuzz_request:
  // it escaped as an uncaught exception).
  EXPECT_EQ(rejection(Endpoint::Completions, "1e44444444444444444444444444444444").first, 400);
  EXPECT_EQ(rejection(Endpoint::ChatCompletions, R"({"messages": [], "temperature": 1e999})").first, 400);
  EXPECT_EQ(api_rejection([] { parse_tokenize_request(R"({"prompt": "x", "n": -1e400})"); }).first, 400);
  const std::vector<std::pair<std::string, std::string>> wrong_types = {
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "n": true})", "n"},
      {R"({"prompt": "x", "seed": "abc"})", "seed"},
      {R"({"prompt": "x", "model": 7})", "model"},
      {R"({"prompt": "x", "user": 7})", "user"},
      {R"({"prompt": "x", "cache_salt": 7})", "cache_salt"},
      {R"({"prompt": "x", "stream_options": true})", "stream_options"},
      {R"({"prompt": 12})", "prompt"},
  };
  for (const auto& [body, param] : wrong_types) {
    SCOPED_TRACE(body);
    EXPECT_EQ(rejection(Endpoint::Completions, body), std::make_pair(400, param));
  }
  // Whole-valued floats are integers.
  EXPECT_EQ(parse_completion(R"({"prompt": "x", "max_tokens": 5.0})").params.max_tokens, 5);
  // A content part whose "type" is not a string (found by fuzz_request: json::value() threw a type_error
  // that escaped as an uncaught exception), or a part that is not text.
  for (const char* part : {R"({"type": ["text"], "text": "hi"})", R"({"type": 3, "text": "hi"})",
                           R"({"type": null, "text": "hi"})", R"({"text": "hi"})", R"({"type": "image_url"})",
                           R"({"type": "text", "text": 5})", R"("hi")"}) {
    SCOPED_TRACE(part);
    EXPECT_EQ(rejection(Endpoint::ChatCompletions,
                        std::string(R"({"messages": [{"role": "user", "content": [)") + part + "]}]}"),
              std::make_pair(400, std::string("messages")));
  }
}

TEST(ServerParse, OutOfRangeValuesAre400) {
  const std::vector<std::pair<std::string, std::string>> out_of_range = {
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "temperature": 2.5})", "temperature"},
      {R"({"prompt": "x", "temperature": -0.1})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "min_p": 2})", "min_p"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "frequency_penalty": -3})", "frequency_penalty"},
      {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": 17})", "n"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "max_tokens": 99999999999})", "max_tokens"},
      {R"({"prompt": "x", "suffix": "and then"})", "suffix"},
      {R"({"prompt": "x", "suffix": 3})", "suffix"},
  };
  for (const auto& [body, param] : out_of_range) {
    SCOPED_TRACE(body);
    EXPECT_EQ(rejection(Endpoint::Completions, body), std::make_pair(400, param));
  }
  EXPECT_EQ(parse_completion(R"({"prompt": "x", "top_k": -1})").params.top_k, 0);  // vLLM's "off"
  EXPECT_NO_THROW(parse_completion(R"({"prompt": "x", "suffix": ""})"));
  EXPECT_EQ(parse_completion(R"({"prompt": "x", "seed": -1})").params.seed, ~uint64_t{0});
}

TEST(ServerParse, LogitBiasMapsTokenIdsToBiases) {
  const ApiRequest r = parse_completion(R"({"prompt": "x", "logit_bias": {"50256": -100, "7": 2.5}})");
  auto bias = r.params.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{7, 2.5f}, {50256, -100.0f}}));
  EXPECT_TRUE(parse_completion(R"({"prompt": "x", "logit_bias": null})").params.logit_bias.empty());
  EXPECT_EQ(parse_chat(R"({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"3": 1}})")
                .params.logit_bias.size(),
            1u);
  std::string many = R"({"prompt": "x", "logit_bias": {)";
  for (int i = 0; i < 1025; ++i) {
    if (i > 0) many += ',';
    many += fmt::format(R"("{}": 1)", i);
  }
  many += "}}";
  for (const std::string& body : std::vector<std::string>{
           R"({"prompt": "x", "logit_bias": [1, 2]})", R"({"prompt": "x", "logit_bias": {"abc": 1}})",
        R"({"prompt": "x", "logit_bias": {"-3": 1}})", R"({"prompt": "x", "logit_bias": {"1.5": 1}})",
        R"({"prompt": "x", "logit_bias": {"99999999999": 1}})", R"({"prompt": "x", "logit_bias": {"5": 101}})",
        R"({"prompt": "x", "logit_bias": {"5": "high"}})", many}) {
    SCOPED_TRACE(body.substr(0, 80));
    EXPECT_EQ(rejection(Endpoint::Completions, body), std::make_pair(400, std::string("logit_bias")));
  }
  // Ids past the vocabulary are found where the prompt is built (the fake engine's vocabulary is 256).
  FakeEngine engine(std::chrono::milliseconds(1), /*context=*/32);
  ApiRequest inside = parse_completion(R"({"prompt": "abc", "logit_bias": {"255": 1}})");
  EXPECT_NO_THROW(build_prompt(inside, engine));
  ApiRequest outside = parse_completion(R"({"prompt": "abc", "logit_bias": {"256": 1}})");
  EXPECT_EQ(api_rejection([&] { build_prompt(outside, engine); }), std::make_pair(400, std::string("logit_bias")));
}

// vLLM's stop_token_ids (a list of ids, checked against the vocabulary where the prompt is built) and
// min_tokens (at most max_tokens, the default one included).
TEST(ServerParse, StopTokenIdsAndMinTokens) {
  const ApiRequest r = parse_completion(R"({"prompt": "x", "stop_token_ids": [7, 2], "min_tokens": 3})");
  EXPECT_EQ(r.params.stop_token_ids, (std::vector<int32_t>{7, 2}));
  EXPECT_EQ(r.params.min_tokens, 3);
  const ApiRequest c = parse_chat(R"({"messages": [{"role": "user", "content": "hi"}], "stop_token_ids": null})");
  EXPECT_TRUE(c.params.stop_token_ids.empty());
  EXPECT_EQ(c.params.min_tokens, 0);
  for (const char* body :
       {R"({"prompt": "x", "stop_token_ids": 7})", R"({"prompt": "x", "stop_token_ids": [-1]})",
        R"({"prompt": "x", "stop_token_ids": ["7"]})", R"({"prompt": "x", "stop_token_ids": [1.5]})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(rejection(Endpoint::Completions, body), std::make_pair(400, std::string("stop_token_ids")));
  }
  for (const char* body : {R"({"prompt": "x", "min_tokens": -1})", R"({"prompt": "x", "min_tokens": "3"})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(rejection(Endpoint::Completions, body), std::make_pair(400, std::string("min_tokens")));
  }
  FakeEngine engine(std::chrono::milliseconds(1), /*context=*/32);
  ApiRequest inside = parse_completion(R"({"prompt": "abc", "stop_token_ids": [255], "min_tokens": 5})");
  EXPECT_NO_THROW(build_prompt(inside, engine));
  ApiRequest outside = parse_completion(R"({"prompt": "abc", "stop_token_ids": [256]})");
  EXPECT_EQ(api_rejection([&] { build_prompt(outside, engine); }), std::make_pair(400, std::string("stop_token_ids")));
  EXPECT_EQ(rejection(Endpoint::Completions, R"({"prompt": "abc", "max_tokens": 4, "min_tokens": 5})"),
            std::make_pair(400, std::string("min_tokens")));
  // Chat's default max_tokens is what the context leaves: a large min_tokens passes the parser.
  ApiRequest chat = parse_chat(R"({"messages": [{"role": "user", "content": "hi"}], "min_tokens": 300})");
  EXPECT_EQ(chat.params.min_tokens, 300);
  EXPECT_EQ(api_rejection([&] { build_prompt(chat, engine); }), std::make_pair(400, std::string("min_tokens")));
  // Completions' default max_tokens (16) bounds min_tokens as well.
  ApiRequest over_default = parse_completion(R"({"prompt": "abc", "min_tokens": 17})");
  EXPECT_EQ(api_rejection([&] { build_prompt(over_default, engine); }), std::make_pair(400, std::string("min_tokens")));
}

// response_format: text, json_object and json_schema become the request's grammar (chat and completions);
// what the grammar cannot enforce, or a shape that is not OpenAI's, is a 400 naming response_format.
TEST(ServerParse, ResponseFormat) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(parse_chat("{" + msgs + R"(, "response_format": {"type": "text"}, "tools": []})").grammar, nullptr);
  EXPECT_EQ(parse_chat("{" + msgs + R"(, "response_format": null, "tools": null})").grammar, nullptr);
  EXPECT_NE(parse_chat("{" + msgs + R"(, "response_format": {"type": "json_object"}})").grammar, nullptr);
  EXPECT_NE(
      parse_chat(
          "{" + msgs +
          R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})")
          .grammar,
      nullptr);
  EXPECT_NE(parse_api_request(Endpoint::Completions, R"({"prompt": "x", "response_format": {"type": "json_object"}})")
                .grammar,
            nullptr);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"("response_format": {"type": "json"})", "response_format"},
      {R"("response_format": "json")", "response_format"},
      {R"("response_format": {"type": "json_schema"})", "response_format"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "not": {"const": "a"}}}})",
       "response_format"},
      {R"("functions": [{"name": "f"}])", "functions"},
  };
  for (const auto& [extra, param] : refused) {
    SCOPED_TRACE(extra);
    EXPECT_EQ(rejection(Endpoint::ChatCompletions, "{" + msgs + ", " + extra + "}"), std::make_pair(400, param));
  }
  try {
    parse_chat(
        "{" + msgs +
        R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "integer", "if": {"minimum": 2}}}}})");
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("'if'"), std::string::npos) << e.what();
  }
}

// vLLM's guided_json / guided_choice, and the same under structured_outputs.
TEST(ServerParse, GuidedFields) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  for (const std::string extra :
       {R"("guided_json": {"type": "object"})", R"("guided_json": "{\"type\": \"integer\"}")",
        R"("guided_choice": ["yes", "no"])", R"("structured_outputs": {"choice": ["a"]})",
        R"("structured_outputs": {"json": {"type": "array"}})", R"("guided_regex": "\\d+")",
        R"("structured_outputs": {"regex": "[ab]c"})", R"("guided_json": {"type": "string", "pattern": "^x+$"})",
        R"("grammar": "root ::= \"yes\" | \"no\"")", R"("guided_grammar": "root ::= [0-9]+")",
        R"("structured_outputs": {"grammar": "root ::= x\nx ::= \"a\" x?"})"})
    EXPECT_NE(parse_chat("{" + msgs + ", " + extra + "}").grammar, nullptr) << extra;
  EXPECT_NE(parse_chat("{" + msgs + R"(, "json_schema": {"type": "object"}})").grammar, nullptr);
  // llama.cpp's clients send an empty grammar for none.
  EXPECT_EQ(parse_chat("{" + msgs + R"(, "grammar": ""})").grammar, nullptr);
  EXPECT_NE(parse_api_request(Endpoint::Completions, R"({"prompt": "x", "grammar": "root ::= \"a\""})").grammar,
            nullptr);
  EXPECT_NE(parse_api_request(Endpoint::Completions, R"({"prompt": "x", "guided_choice": ["a", "b"]})").grammar,
            nullptr);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"("guided_json": "{nope")", "guided_json"},
      {R"("guided_json": {"type": "string", "pattern": "\\bx"})", "guided_json"},
      {R"("guided_regex": "(a")", "guided_regex"},
      {R"("guided_regex": 3)", "guided_regex"},
      {R"("guided_regex": "a", "guided_choice": ["a"])", "guided_choice"},
      {R"("structured_outputs": {"regex": "a\\1"})", "structured_outputs"},
      {R"("guided_choice": "yes")", "guided_choice"},
      {R"("guided_choice": [])", "guided_choice"},
      {R"("guided_choice": ["a", 1])", "guided_choice"},
      {R"("guided_choice": ["a"], "guided_json": {})", "guided_choice"},
      {R"("guided_choice": ["a"], "response_format": {"type": "json_object"})", "guided_choice"},
      {R"("structured_outputs": [1])", "structured_outputs"},
      {R"("structured_outputs": {"choice": ["a"]}, "guided_choice": ["b"])", "structured_outputs"},
      {R"("grammar": "root ::= expr\nexpr ::= expr \"+\" | \"1\"")", "grammar"},
      {R"("grammar": "item ::= \"a\"")", "grammar"},
      {R"("grammar": 7)", "grammar"},
      {R"("grammar": "root ::= \"a\"", "guided_grammar": "root ::= \"b\"")", "grammar"},
      {R"("grammar": "root ::= \"a\"", "guided_regex": "a")", "guided_regex"},
      {R"("guided_grammar": "root ::= (")", "guided_grammar"},
      {R"("structured_outputs": {"grammar": "root ::= <tok>"})", "structured_outputs"},
      {R"("grammar": "root ::= \"a\"", "response_format": {"type": "json_object"})", "grammar"},
      {R"("json_schema": {"type": "object"}, "guided_json": {})", "json_schema"},
      {R"("json_schema": {"not": {}})", "json_schema"},
      {R"("json_schema": {"type": "object"}, "grammar": "root ::= \"a\"")", "json_schema"},
  };
  for (const auto& [extra, param] : refused) {
    SCOPED_TRACE(extra);
    EXPECT_EQ(rejection(Endpoint::ChatCompletions, "{" + msgs + ", " + extra + "}"), std::make_pair(400, param));
  }
}

// tools, tool_choice and parallel_tool_calls; the tools keep their keys' order (the template prints them).
TEST(ServerParse, ToolsAndToolChoice) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  const std::string tool = R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}, "description": "d"}})";
  ApiRequest r = parse_chat("{" + msgs + R"(, "tools": [)" + tool + "]}");
  ASSERT_TRUE(r.tools.is_array());
  EXPECT_EQ(r.tools.dump(), nlohmann::ordered_json::parse(tool).dump().insert(0, "[") + "]");
  EXPECT_TRUE(r.calls_tools());
  EXPECT_TRUE(r.parallel_tool_calls);
  r = parse_chat("{" + msgs + R"(, "tools": [)" + tool + R"(], "tool_choice": "none", "parallel_tool_calls": false})");
  EXPECT_FALSE(r.calls_tools());  // the template still sees the tools; the reply is not read for calls
  EXPECT_TRUE(r.tools.is_array());
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_TRUE(parse_chat("{" + msgs + R"(, "tools": [)" + tool + R"(], "tool_choice": "auto"})").calls_tools());
  r = parse_chat("{" + msgs + R"(, "tools": [)" + tool + R"(], "tool_choice": "required"})");
  EXPECT_TRUE(r.tool_required && r.calls_tools());
  r = parse_chat("{" + msgs + R"(, "tools": [)" + tool +
                 R"(], "tool_choice": {"type": "function", "function": {"name": "f"}}})");
  EXPECT_EQ(r.forced_tool, "f");
  EXPECT_TRUE(r.calls_tools());
  EXPECT_FALSE(parse_chat("{" + msgs + R"(, "tools": []})").calls_tools());

  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"("tools": {})", "tools"},
      {R"("tools": [1])", "tools"},
      {R"("tools": [{"type": "retrieval", "function": {"name": "f"}}])", "tools"},
      {R"("tools": [{"type": "function"}])", "tools"},
      {R"("tools": [{"type": "function", "function": {"name": ""}}])", "tools"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}])", "tools"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "description": 3}}])", "tools"},
      {R"("tool_choice": "required")", "tool_choice"},
      {R"("tool_choice": {"type": "function", "function": {"name": "g"}}, "tools": [)" + tool + "]", "tool_choice"},
      {R"("tool_choice": {"type": "function"}, "tools": [)" + tool + "]", "tool_choice"},
      {R"("tool_choice": "required", "tools": [)" + tool + R"(], "response_format": {"type": "json_object"})",
       "response_format"},
      {R"("tool_choice": "sometimes")", "tool_choice"},
      {R"("tool_choice": 1)", "tool_choice"},
      {R"("parallel_tool_calls": "yes")", "parallel_tool_calls"},
  };
  for (const auto& [extra, param] : refused) {
    SCOPED_TRACE(extra);
    EXPECT_EQ(rejection(Endpoint::ChatCompletions, "{" + msgs + ", " + extra + "}"), std::make_pair(400, param));
  }
  std::string many = R"("tools": [)";
  for (int i = 0; i < 129; ++i) many += (i ? "," : "") + tool;
  EXPECT_EQ(rejection(Endpoint::ChatCompletions, "{" + msgs + ", " + many + "]}"), std::make_pair(400, std::string("tools")));
}

// An assistant's tool calls and a tool's result reach the template as transformers' templates read them:
// the arguments an object (OpenAI sends them as JSON text), tool_call_id and name beside the content.
TEST(ServerParse, ToolCallMessages) {
  const ApiRequest r = parse_chat(R"({"messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "reasoning_content": "think",
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"a\": 1}"}}]},
      {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call_1", "name": "get_weather"}]})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_TRUE(r.messages[0].extra.is_null());
  EXPECT_EQ(r.messages[1].content, "");
  EXPECT_EQ(r.messages[1].extra.dump(),
            R"({"reasoning_content":"think","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris","a":1}}}]})");
  EXPECT_EQ(r.messages[2].extra.dump(), R"({"name":"get_weather","tool_call_id":"call_1"})");

  const std::vector<std::string> refused = {
      R"({"role": "assistant", "tool_calls": {}})",
      R"({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]})",
      R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}]})",
      R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]})",
      R"({"role": "user", "content": "x", "tool_calls": []})",
      R"({"role": "tool", "content": "x", "tool_call_id": 7})",
  };
  for (const std::string& m : refused) {
    SCOPED_TRACE(m);
    EXPECT_EQ(rejection(Endpoint::ChatCompletions, R"({"messages": [)" + m + "]}"),
              std::make_pair(400, std::string(m.find("tool_call_id") != std::string::npos ? "tool_call_id" : "messages")));
  }
}

// The template's variables: the kwargs, with the tools as `tools` unless the kwargs give their own.
TEST(ServerParse, ChatTemplateVariables) {
  using oj = nlohmann::ordered_json;
  const oj tools = oj::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_TRUE(chat_template_variables(oj(), oj()).is_null());
  EXPECT_EQ(chat_template_variables(oj(), tools), oj({{"tools", tools}}));
  EXPECT_EQ(chat_template_variables(oj({{"x", 1}}), tools), oj({{"x", 1}, {"tools", tools}}));
  EXPECT_EQ(chat_template_variables(oj({{"tools", 2}}), tools), oj({{"tools", 2}}));
  EXPECT_EQ(chat_template_variables(oj({{"x", 1}}), oj::array()), oj({{"x", 1}}));
}

TEST(ServerParse, TokenizeAndDetokenizeRequests) {
  TokenizeRequest t = parse_tokenize_request(R"({"model": "m", "prompt": "hi"})");
  EXPECT_EQ(t.model, "m");
  EXPECT_EQ(t.text, "hi");
  EXPECT_TRUE(t.add_special);
  EXPECT_FALSE(t.is_chat);
  t = parse_tokenize_request(R"({"content": "yo", "add_special_tokens": false})");  // llama.cpp's field
  EXPECT_EQ(t.text, "yo");
  EXPECT_FALSE(t.add_special);
  t = parse_tokenize_request(R"({"messages": [{"role": "user", "content": "hey"}]})");
  EXPECT_TRUE(t.is_chat);
  ASSERT_EQ(t.messages.size(), 1u);
  EXPECT_EQ(t.messages[0].content, "hey");
  const auto tokenize_rejection = [](const std::string& body) {
    return api_rejection([&] { parse_tokenize_request(body); });
  };
  EXPECT_EQ(tokenize_rejection("{}"), std::make_pair(400, std::string("prompt")));
  EXPECT_EQ(tokenize_rejection(R"({"prompt": 5})"), std::make_pair(400, std::string("prompt")));
  EXPECT_EQ(tokenize_rejection(R"({"prompt": "a", "messages": []})"), std::make_pair(400, std::string("messages")));
  EXPECT_EQ(tokenize_rejection(R"({"prompt": "a", "add_special_tokens": 1})"),
            std::make_pair(400, std::string("add_special_tokens")));
  EXPECT_EQ(tokenize_rejection("[1]").first, 400);

  EXPECT_EQ(parse_detokenize_request(R"({"tokens": [1, 104, 255]})", 256).tokens, (std::vector<int32_t>{1, 104, 255}));
  EXPECT_TRUE(parse_detokenize_request(R"({"tokens": []})", 256).tokens.empty());
  for (const std::string body : {R"({})", R"({"tokens": "abc"})", R"({"tokens": [256]})", R"({"tokens": [-1]})",
                                 R"({"tokens": [1.5]})", R"({"tokens": [[1]]})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(api_rejection([&] { parse_detokenize_request(body, 256); }), std::make_pair(400, std::string("tokens")));
  }
}

// What a request leaves out takes the model file's recommended sampling (llama.cpp's and vLLM's rule); what it
// gives stays, and a model without recommendations keeps the API's defaults.
TEST(ServerParse, ModelSamplingDefaultsFillWhatTheRequestLeavesOut) {
  FakeEngine engine(std::chrono::milliseconds(1), /*context=*/64);
  ApiRequest plain = parse_completion(R"({"prompt": "abc"})");
  build_prompt(plain, engine);
  EXPECT_EQ(plain.params.temperature, kDefaultTemperature);
  EXPECT_EQ(plain.params.top_k, 0);

  SamplingDefaults d;
  d.temperature = 0.6f;
  d.top_p = 0.95f;
  d.top_k = 20;
  d.min_p = 0.05f;
  d.repetition_penalty = 1.1f;
  engine.set_sampling_defaults(d);
  ApiRequest bare = parse_chat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  build_prompt(bare, engine);
  EXPECT_EQ(bare.params.temperature, 0.6f);
  EXPECT_EQ(bare.params.top_p, 0.95f);
  EXPECT_EQ(bare.params.top_k, 20);
  EXPECT_EQ(bare.params.min_p, 0.05f);
  EXPECT_EQ(bare.params.repetition_penalty, 1.1f);

  ApiRequest given = parse_completion(
      R"({"prompt": "abc", "temperature": 0, "top_p": 1, "top_k": -1, "min_p": 0, "repetition_penalty": 1})");
  build_prompt(given, engine);
  EXPECT_EQ(given.params.temperature, 0.0f);
  EXPECT_EQ(given.params.top_p, 1.0f);
  EXPECT_EQ(given.params.top_k, 0);
  EXPECT_EQ(given.params.min_p, 0.0f);
  EXPECT_EQ(given.params.repetition_penalty, 1.0f);

  ApiRequest some = parse_completion(R"({"prompt": "abc", "temperature": 1.2})");
  build_prompt(some, engine);
  EXPECT_EQ(some.params.temperature, 1.2f);
  EXPECT_EQ(some.params.top_k, 20);
}

// echo (completions): the prompt leads each choice; with logprobs the engine is asked for the prompt's too
// (the same number of alternatives as the generated tokens get).
TEST(ServerParse, EchoAsksForPromptLogprobsWithLogprobs) {
  EXPECT_FALSE(parse_completion(R"({"prompt": "x"})").echo);
  EXPECT_EQ(parse_completion(R"({"prompt": "x"})").params.prompt_logprobs, -1);
  const ApiRequest plain = parse_completion(R"({"prompt": "x", "echo": true})");
  EXPECT_TRUE(plain.echo);
  EXPECT_EQ(plain.params.prompt_logprobs, -1);
  const ApiRequest scored = parse_completion(R"({"prompt": "x", "echo": true, "logprobs": 0, "max_tokens": 1})");
  EXPECT_EQ(scored.params.prompt_logprobs, 0);
  EXPECT_EQ(parse_completion(R"({"prompt": "x", "echo": true, "logprobs": 3})").params.prompt_logprobs, 3);
  EXPECT_EQ(parse_completion(R"({"prompt": "x", "logprobs": 3})").params.prompt_logprobs, -1);
  EXPECT_EQ(rejection(Endpoint::Completions, R"({"prompt": "x", "echo": "yes"})"),
            std::make_pair(400, std::string("echo")));
  // vLLM's prompt_logprobs, on either endpoint; the engine computes the larger of it and echo's count.
  const ApiRequest asked = parse_chat(R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 2})");
  EXPECT_EQ(asked.prompt_logprobs, 2);
  EXPECT_EQ(asked.params.prompt_logprobs, 2);
  EXPECT_EQ(
      parse_completion(R"({"prompt": "x", "echo": true, "logprobs": 4, "prompt_logprobs": 1})").params.prompt_logprobs,
      4);
  EXPECT_EQ(parse_completion(R"({"prompt": "x", "prompt_logprobs": null})").prompt_logprobs, -1);
  for (const char* bad : {R"({"prompt": "x", "prompt_logprobs": 21})", R"({"prompt": "x", "prompt_logprobs": -1})",
                          R"({"prompt": "x", "prompt_logprobs": true})"})
    EXPECT_EQ(rejection(Endpoint::Completions, bad), std::make_pair(400, std::string("prompt_logprobs"))) << bad;
  EXPECT_TRUE(parse_completion(R"({"prompt": "x", "return_tokens_as_token_ids": true})").tokens_as_ids);
  EXPECT_FALSE(parse_chat(R"({"messages": [{"role": "user", "content": "x"}]})").tokens_as_ids);
  EXPECT_EQ(rejection(Endpoint::ChatCompletions,
                      R"({"messages": [{"role": "user", "content": "x"}], "return_tokens_as_token_ids": 1})"),
            std::make_pair(400, std::string("return_tokens_as_token_ids")));

  FakeEngine engine;
  ApiRequest ids = parse_completion(R"({"prompt": [[104, 105], "yo"], "echo": true})");
  const std::vector<BuiltPrompt> built = build_prompts(ids, engine);
  ASSERT_EQ(built.size(), 2u);
  EXPECT_EQ(built[0].echo_text, engine.detokenize({104, 105}));
  EXPECT_EQ(built[1].echo_text, "yo");
}

// Each prompt of a list is built as one alone would be (its own default max_tokens); an error names the prompt.
TEST(ServerParse, BuildPromptsBuildsEachPromptOfAList) {
  FakeEngine engine(std::chrono::milliseconds(1), /*context=*/20);
  ApiRequest one = parse_completion(R"({"prompt": "abc"})");
  const std::vector<BuiltPrompt> single = build_prompts(one, engine);
  ASSERT_EQ(single.size(), 1u);
  EXPECT_EQ(single[0].ids, (std::vector<int32_t>{'a', 'b', 'c'}));
  EXPECT_EQ(single[0].max_tokens, kDefaultCompletionMaxTokens);

  ApiRequest list = parse_completion(R"({"prompt": ["ab", [1, 2, 3], ")" + std::string(10, 'x') + R"("]})");
  const std::vector<BuiltPrompt> built = build_prompts(list, engine);
  ASSERT_EQ(built.size(), 3u);
  EXPECT_EQ(built[0].ids, (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(built[1].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(built[0].max_tokens, kDefaultCompletionMaxTokens);
  EXPECT_EQ(built[2].max_tokens, 20 - 10);  // the rest of the context, below 16

  ApiRequest bad = parse_completion(R"({"prompt": ["ab", [1, 300]]})");
  try {
    build_prompts(bad, engine);
    FAIL() << "expected an error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "prompt");
    EXPECT_EQ(std::string(e.what()).rfind("prompt 1: ", 0), 0u) << e.what();
  }
}

TEST(ServerParse, BuildPromptTokenizesAndChecksTheContext) {
  FakeEngine engine(std::chrono::milliseconds(1), /*context=*/32);
  ApiRequest completion = parse_completion(R"({"prompt": "abc"})");
  EXPECT_EQ(build_prompt(completion, engine), (std::vector<int32_t>{'a', 'b', 'c'}));
  EXPECT_EQ(completion.params.max_tokens, kDefaultCompletionMaxTokens);

  ApiRequest chat = parse_chat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  const auto chat_ids = build_prompt(chat, engine);
  EXPECT_EQ(chat_ids, engine.tokenize("user: hi\nassistant:", true));
  EXPECT_EQ(chat.params.max_tokens, 32 - static_cast<int>(chat_ids.size()));  // the rest of the context

  ApiRequest too_long = parse_completion(R"({"prompt": ")" + std::string(40, 'x') + R"("})");
  try {
    build_prompt(too_long, engine);
    FAIL() << "expected a context-length error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.code(), "context_length_exceeded");
  }
  ApiRequest bad_ids = parse_completion(R"({"prompt": [1, 300]})");
  EXPECT_THROW(build_prompt(bad_ids, engine), ApiError);
  ApiRequest empty = parse_completion(R"({"prompt": ""})");
  EXPECT_THROW(build_prompt(empty, engine), ApiError);
}

// A backend whose context has no end (a streaming window) bounds the default completion by its own limit.
TEST(ServerParse, DefaultMaxTokensFollowTheBackendsLimit) {
  FakeEngine engine(std::chrono::milliseconds(1), int64_t{1} << 40);
  engine.set_default_completion_limit(100);
  ApiRequest chat = parse_chat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  build_prompt(chat, engine);
  EXPECT_EQ(chat.params.max_tokens, 100);
  ApiRequest completion = parse_completion(R"({"prompt": "abc"})");
  build_prompt(completion, engine);
  EXPECT_EQ(completion.params.max_tokens, std::min(100, kDefaultCompletionMaxTokens));
  ApiRequest given = parse_completion(R"({"prompt": "abc", "max_tokens": 5000})");
  build_prompt(given, engine);
  EXPECT_EQ(given.params.max_tokens, 5000);
}

// generation_config.json's max_new_tokens: the new tokens of a request that names none, where the context
// leaves room; the completions API's default 16 stays the lesser, and a request's own max_tokens stands.
TEST(ServerParse, ModelMaxNewTokensBoundTheDefault) {
  FakeEngine engine(std::chrono::milliseconds(1), /*context=*/64);
  SamplingDefaults d;
  d.max_tokens = 20;
  engine.set_sampling_defaults(d);
  ApiRequest chat = parse_chat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  const auto chat_ids = build_prompt(chat, engine);
  ASSERT_LT(chat_ids.size() + 20, 64u);
  EXPECT_EQ(chat.params.max_tokens, 20);
  ApiRequest completion = parse_completion(R"({"prompt": "abc"})");
  build_prompt(completion, engine);
  EXPECT_EQ(completion.params.max_tokens, kDefaultCompletionMaxTokens);
  ApiRequest given = parse_chat(R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 30})");
  build_prompt(given, engine);
  EXPECT_EQ(given.params.max_tokens, 30);

  d.max_tokens = 8;  // below the completions default
  engine.set_sampling_defaults(d);
  ApiRequest short_completion = parse_completion(R"({"prompt": "abc"})");
  build_prompt(short_completion, engine);
  EXPECT_EQ(short_completion.params.max_tokens, 8);

  d.max_tokens = 1000;  // beyond the context: the context's rest
  engine.set_sampling_defaults(d);
  ApiRequest long_chat = parse_chat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  build_prompt(long_chat, engine);
  EXPECT_EQ(long_chat.params.max_tokens, 64 - static_cast<int>(chat_ids.size()));
}

TEST(ServerParse, CacheSaltSeparatesKeysUnlessShared) {
  EXPECT_EQ(derive_cache_salt("", false, ""), "");
  EXPECT_EQ(derive_cache_salt("", false, "s"), "|salt:s");
  const std::string a = derive_cache_salt("key-a", false, "");
  const std::string b = derive_cache_salt("key-b", false, "");
  EXPECT_FALSE(a.empty());
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find("key-a"), std::string::npos);  // the key itself never leaves the server
  EXPECT_NE(derive_cache_salt("key-a", false, "s1"), derive_cache_salt("key-a", false, "s2"));
  EXPECT_EQ(derive_cache_salt("key-a", true, ""), "");
  EXPECT_EQ(derive_cache_salt("key-a", true, "s"), derive_cache_salt("key-b", true, "s"));
}

}  // namespace
}  // namespace kvserve::server
