// Response shapes: exact OpenAI JSON for whole responses, stream chunks, usage and logprobs; SSE
// framing; Prometheus text for /metrics.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "server/api_error.h"
#include "server/metrics.h"
#include "server/response_format.h"

namespace kvserve::server {
namespace {

std::string piece_of(int32_t id) { return std::string(1, static_cast<char>(id)); }

ResponseHeader header(const char* id) { return {id, 1700000000, "tiny"}; }

TEST(ServerFormat, UsageHasCachedTokens) {
  EXPECT_EQ(usage_json({10, 5, 8}), json::parse(R"({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                                                     "prompt_tokens_details": {"cached_tokens": 8}})"));
}

TEST(ServerFormat, CompletionResponseShape) {
  ChoiceResult c{"hi", {{'h', -0.1f, {{'h', -0.1f}, {'x', -2.0f}}}, {'i', -0.2f, {{'i', -0.2f}, {'y', -3.0f}}}}, "length"};
  const json r = full_response(Endpoint::Completions, header("cmpl-1"), {c}, {3, 2, 0}, true, 2, piece_of);
  EXPECT_EQ(r["id"], "cmpl-1");
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["created"], 1700000000);
  EXPECT_EQ(r["model"], "tiny");
  ASSERT_EQ(r["choices"].size(), 1u);
  EXPECT_EQ(r["choices"][0]["index"], 0);
  EXPECT_EQ(r["choices"][0]["text"], "hi");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  const json& lp = r["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::parse(R"(["h", "i"])"));
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -0.2f);
  EXPECT_EQ(lp["text_offset"], json::parse("[0, 1]"));
  EXPECT_FLOAT_EQ(lp["top_logprobs"][0]["x"].get<float>(), -2.0f);
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
}

TEST(ServerFormat, ChatResponseShape) {
  ChoiceResult a{"yes", {}, "stop"}, b{"no", {}, "length"};
  const json r = full_response(Endpoint::ChatCompletions, header("chatcmpl-1"), {a, b}, {4, 2, 0}, false, 0, piece_of);
  EXPECT_EQ(r["object"], "chat.completion");
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][1]["index"], 1);
  EXPECT_EQ(r["choices"][0]["message"], json::parse(R"({"role": "assistant", "content": "yes"})"));
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r["choices"][1]["finish_reason"], "length");
  EXPECT_TRUE(r["choices"][1]["stop_reason"].is_null());
  a.stop_reason = 7;
  EXPECT_EQ(full_response(Endpoint::ChatCompletions, header("chatcmpl-1"), {a}, {4, 2, 0}, false, 0,
                          piece_of)["choices"][0]["stop_reason"],
            7);
}

TEST(ServerFormat, ChatLogprobsShape) {
  const json lp = chat_logprobs_json({{'A', -0.25f, {{'A', -0.25f}, {'B', -1.5f}, {'C', -2.0f}}}}, 2, piece_of);
  ASSERT_EQ(lp["content"].size(), 1u);
  const json& t = lp["content"][0];
  EXPECT_EQ(t["token"], "A");
  EXPECT_FLOAT_EQ(t["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(t["bytes"], json::parse("[65]"));
  ASSERT_EQ(t["top_logprobs"].size(), 2u);  // capped at top_n
  EXPECT_EQ(t["top_logprobs"][1]["token"], "B");
  EXPECT_TRUE(lp["refusal"].is_null());
}

// vLLM's prompt_logprobs: null first, then {"ID": {logprob, rank, decoded_token}} for the token and its top_n
// alternatives; on each completions choice, at the top level of a chat reply (the first choice's).
TEST(ServerFormat, PromptLogprobsShape) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<TokenInfo> prompt = {{'a', nan, {}, 0}, {'b', -1.25f, {{'x', -0.5f}, {'b', -1.25f}, {'y', -3.0f}}, 2}};
  const json p = prompt_logprobs_json(prompt, 1, piece_of);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_TRUE(p[0].is_null());
  EXPECT_EQ(p[1], json::parse(R"({"98": {"logprob": -1.25, "rank": 2, "decoded_token": "b"},
                                  "120": {"logprob": -0.5, "rank": 1, "decoded_token": "x"}})"));
  ChoiceResult c{"hi", {}, "length"};
  c.prompt_logprobs = prompt;
  const json completion =
      full_response(Endpoint::Completions, header("cmpl-1"), {c, c}, {3, 2, 0}, false, 0, piece_of, 1);
  EXPECT_EQ(completion["choices"][1]["prompt_logprobs"], p);
  const json chat =
      full_response(Endpoint::ChatCompletions, header("chatcmpl-1"), {c}, {3, 2, 0}, false, 0, piece_of, 1);
  EXPECT_EQ(chat["prompt_logprobs"], p);
  EXPECT_FALSE(chat["choices"][0].contains("prompt_logprobs"));
  ChoiceResult plain{"hi", {}, "length"};
  EXPECT_FALSE(
      full_response(Endpoint::Completions, header("cmpl-1"), {plain}, {3, 2, 0}, false, 0, piece_of)["choices"][0]
          .contains("prompt_logprobs"));
  ChunkPiece first;
  first.prompt_tokens = &prompt;
  first.prompt_top_n = 1;
  EXPECT_EQ(
      stream_chunk(Endpoint::Completions, header("cmpl-1"), first, false, piece_of)["choices"][0]["prompt_logprobs"],
      p);
}

TEST(ServerFormat, StreamChunks) {
  ChunkPiece first;
  first.first = true;
  const json opening = stream_chunk(Endpoint::ChatCompletions, header("c"), first, true, piece_of);
  EXPECT_EQ(opening["object"], "chat.completion.chunk");
  EXPECT_EQ(opening["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_TRUE(opening["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(opening.contains("usage") && opening["usage"].is_null());

  ChunkPiece last;
  last.index = 1;
  last.finish_reason = "stop";
  const json end = stream_chunk(Endpoint::ChatCompletions, header("c"), last, false, piece_of);
  EXPECT_EQ(end["choices"][0]["index"], 1);
  EXPECT_EQ(end["choices"][0]["delta"], json::object());
  EXPECT_EQ(end["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(end["choices"][0]["stop_reason"].is_null());
  last.stop_reason = "END";
  EXPECT_EQ(stream_chunk(Endpoint::ChatCompletions, header("c"), last, false, piece_of)["choices"][0]["stop_reason"],
            "END");
  EXPECT_FALSE(end.contains("usage"));

  std::vector<TokenInfo> toks = {{'o', -1.0f, {}}, {'k', -1.0f, {}}};
  ChunkPiece text;
  text.text = "ok";
  text.tokens = &toks;
  text.text_offset = 5;
  const json c = stream_chunk(Endpoint::Completions, header("c"), text, false, piece_of);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "ok");
  EXPECT_EQ(c["choices"][0]["logprobs"]["text_offset"], json::parse("[5, 6]"));

  const json u = usage_chunk(Endpoint::Completions, header("c"), {1, 2, 0});
  EXPECT_EQ(u["choices"], json::array());
  EXPECT_EQ(u["usage"]["completion_tokens"], 2);
}

TEST(ServerFormat, SseFramingAndInvalidUtf8) {
  EXPECT_EQ(sse_data(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // Half of a UTF-8 character (a token can be one) must not make serialization throw.
  std::string half = "\xE2\x82";
  EXPECT_NO_THROW(dump_json(json{{"t", half}}));
}

TEST(ServerFormat, ErrorShape) {
  const json e = ApiError(400, "bad n", "n").to_json();
  EXPECT_EQ(e, json::parse(R"({"error": {"message": "bad n", "type": "invalid_request_error", "param": "n", "code": null}})"));
}

TEST(ServerFormat, ModelsAndBlocks) {
  const json m = models_json("tiny", 5, 512);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["max_model_len"], 512);

  BlockMap map{{0, -1, -2}, {1, 0, 0}};
  EngineStats s;
  s.num_blocks = 3;
  s.prefix_queries = 10;
  s.prefix_hits = 5;
  const json b = kv_blocks_json(map, s, 16);
  EXPECT_EQ(b["owner"], json::parse("[0, -1, -2]"));
  EXPECT_EQ(b["shared"], json::parse("[1, 0, 0]"));
  EXPECT_DOUBLE_EQ(b["prefix_hit_rate"].get<double>(), 0.5);
  EXPECT_EQ(b["block_size"], 16);
}

TEST(ServerFormat, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5.0);
  std::string out;
  h.render(out, "x_seconds", "help");
  EXPECT_NE(out.find("# TYPE x_seconds histogram\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_sum 5.55\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_count 3\n"), std::string::npos);
}

TEST(ServerFormat, MetricsText) {
  ServerMetrics m;
  m.observe_request(0.2, 0.05, 10, 0.8);
  EngineStats s;
  s.kv_usage = 0.25;
  s.free_blocks = 5;
  s.used_blocks = 2;
  s.cached_blocks = 1;
  s.preemptions = 3;
  s.prefix_evictions = 9;
  const std::string text = m.render(s);
  for (const char* line :
       {"kvserve_kv_cache_usage_ratio 0.25\n", "kvserve_kv_blocks{state=\"free\"} 5\n", "kvserve_kv_blocks{state=\"used\"} 2\n",
        "kvserve_kv_blocks{state=\"cached\"} 1\n", "kvserve_preemptions_total 3\n", "kvserve_prefix_cache_queries_total 0\n",
        "kvserve_prefix_cache_hits_total 0\n", "kvserve_prefix_cache_evictions_total 9\n", "kvserve_requests_running 0\n", "kvserve_requests_waiting 0\n",
        "kvserve_prompt_tokens_total 0\n", "kvserve_generation_tokens_total 0\n",
        "kvserve_time_to_first_token_seconds_count 1\n", "kvserve_time_per_output_token_seconds_count 1\n",
        "kvserve_e2e_request_latency_seconds_count 1\n", "# TYPE kvserve_preemptions_total counter\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line;
}

}  // namespace
}  // namespace kvserve::server
