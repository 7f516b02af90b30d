// The HTTP layer over a live loopback socket, with a scripted FakeEngine behind it: routes, auth,
// status codes and error bodies, streaming shapes, and cancellation when a client disconnects.
#ifdef KVSERVE_HAVE_HTTPLIB

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "grammar_checks.h"
#include "server/http_server.h"
#include "server/request_parser.h"
#include "test_server_fake_engine.h"

namespace kvserve::server {
namespace {

using nlohmann::json;
using testing::FakeEngine;
using namespace std::chrono_literals;

// A server on a free loopback port, serving from its own thread until the fixture ends.
class LiveServer {
 public:
  explicit LiveServer(FakeEngine& engine, ServerOptions opts = {}) {
    opts.host = "127.0.0.1";
    opts.port = 0;
    opts.model_name = "tiny";
    opts.http_threads = 16;
    server_ = std::make_unique<HttpServer>(engine, opts);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~LiveServer() {
    server_->stop();
    thread_.join();
  }
  httplib::Client client(const std::string& api_key = {}) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    if (!api_key.empty()) c.set_bearer_token_auth(api_key.c_str());
    return c;
  }
  int port() const { return port_; }

 private:
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
};

// The JSON payloads of an SSE body, "[DONE]" included as a string.
std::vector<json> sse_events(const std::string& body) {
  std::vector<json> events;
  size_t start = 0;
  while (start < body.size()) {
    size_t end = body.find("\n\n", start);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(start, end - start);
    start = end + 2;
    if (event.rfind("data: ", 0) != 0) continue;  // keep-alive comments
    const std::string data = event.substr(6);
    events.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
  }
  return events;
}

void expect_error(const httplib::Result& res, int status, const std::string& param = {}) {
  ASSERT_TRUE(res) << "no response";
  EXPECT_EQ(res->status, status) << res->body;
  const json body = json::parse(res->body);
  ASSERT_TRUE(body.contains("error")) << res->body;
  EXPECT_TRUE(body["error"]["message"].is_string());
  EXPECT_TRUE(body["error"].contains("type"));
  EXPECT_TRUE(body["error"].contains("code"));
  if (!param.empty()) {
    EXPECT_EQ(body["error"]["param"], param);
  }
}

TEST(ServerHttp, HealthModelsPageAndUnknownRoutes) {
  FakeEngine engine;
  LiveServer server(engine);
  auto cli = server.client();
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");
  auto page = cli.Get("/");
  ASSERT_TRUE(page);
  EXPECT_NE(page->body.find("<canvas id=\"kv-canvas\""), std::string::npos);
  EXPECT_NE(page->body.find("/v1/kv/blocks"), std::string::npos);
  expect_error(cli.Get("/v1/nope"), 404);
  expect_error(cli.Get("/v1/completions"), 404);  // only POST is routed
}

TEST(ServerHttp, CompletionNonStreaming) {
  FakeEngine engine;
  engine.set_cached_tokens(2);
  LiveServer server(engine);
  auto res = server.client().Post("/v1/completions", R"({"model": "tiny", "prompt": "hey", "max_tokens": 5, "seed": 7})",
                                  "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json body = json::parse(res->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(body["choices"][0]["text"], "abcde");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"], json::parse(R"({"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8,
                                           "prompt_tokens_details": {"cached_tokens": 2}})"));
  const auto added = engine.added();
  ASSERT_EQ(added.size(), 1u);
  EXPECT_EQ(added[0].prompt_ids, (std::vector<int32_t>{'h', 'e', 'y'}));
  EXPECT_EQ(added[0].params.max_tokens, 5);
  EXPECT_TRUE(added[0].params.has_seed);
  EXPECT_EQ(added[0].cache_salt, "");
}

TEST(ServerHttp, SlowNonStreamingResponseStillParses) {
  // Longer than the plain-response wait: the body goes out chunked with leading-space probes.
  FakeEngine engine(20ms);
  LiveServer server(engine);
  auto res = server.client().Post("/v1/completions", R"({"prompt": "x", "max_tokens": 40})", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const json body = json::parse(res->body);
  EXPECT_EQ(body["choices"][0]["text"].get<std::string>().size(), 40u);
}

TEST(ServerHttp, ChatStreamingWithUsage) {
  FakeEngine engine;
  LiveServer server(engine);
  auto res = server.client().Post(
      "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": true, "n": 2,
          "stream_options": {"include_usage": true}})",
      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<json> events = sse_events(res->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json& usage = events[events.size() - 2];
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 8);
  std::string text[2];
  int finishes = 0;
  bool role_seen[2] = {false, false};
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json& e = events[i];
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_TRUE(e["usage"].is_null());
    const json& choice = e["choices"][0];
    const int idx = choice["index"];
    if (choice["delta"].contains("role")) {
      EXPECT_FALSE(role_seen[idx]);
      EXPECT_EQ(text[idx], "");  // the role comes first
      role_seen[idx] = true;
    }
    if (choice["delta"].contains("content")) text[idx] += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) {
      EXPECT_EQ(choice["finish_reason"], "length");
      ++finishes;
    }
  }
  EXPECT_TRUE(role_seen[0] && role_seen[1]);
  EXPECT_EQ(text[0], "abcd");
  EXPECT_EQ(text[1], "abcd");
  EXPECT_EQ(finishes, 2);
}

// A streamed chat reply's deltas joined: its reasoning, its content (every piece checked for `no_tag`, a tag that
// must not leak into it) and its first tool call's arguments.
struct StreamedChat {
  std::string reasoning, content, arguments;
};
StreamedChat join_chat_stream(const std::string& body, const std::string& no_tag) {
  StreamedChat out;
  for (const json& e : sse_events(body)) {
    if (e == "[DONE]") continue;
    const json& delta = e["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) out.reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("tool_calls"))
      out.arguments += delta["tool_calls"][0]["function"]["arguments"].get<std::string>();
    if (delta.contains("content") && delta["content"].is_string()) {
      const std::string piece = delta["content"];
      EXPECT_EQ(piece.find(no_tag), std::string::npos) << "a tag leaked into content: " << piece;
      out.content += piece;
    }
  }
  return out;
}

// The chat request `ask` (a JSON object missing its closing brace) whole and streamed: the reply's reasoning and
// content both times.
// A whole chat reply that is one get_weather call with `arguments`, after `reasoning`.
void expect_one_weather_call(const httplib::Result& res, const std::string& reasoning, const json& arguments) {
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json choice = json::parse(res->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["reasoning_content"], reasoning);
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()), arguments);
}

// A tool_choice "required" request: a reply that is a call, and the grammar the engine got (null on failure).
std::shared_ptr<const Grammar> forced_call_grammar(httplib::Client cli, const FakeEngine& engine,
                                                   const std::string& ask) {
  auto res = cli.Post("/v1/chat/completions", ask + R"(, "tool_choice": "required"})", "application/json");
  EXPECT_TRUE(res);
  if (!res) return nullptr;
  EXPECT_EQ(res->status, 200) << res->body;
  if (res->status != 200) return nullptr;
  EXPECT_EQ(json::parse(res->body)["choices"][0]["finish_reason"], "tool_calls");
  return engine.added().back().grammar;
}

void expect_chat_split(httplib::Client& cli, const std::string& ask, const std::string& no_tag,
                       const std::string& reasoning, const std::string& content) {
  auto whole = cli.Post("/v1/chat/completions", ask + "}", "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const json message = json::parse(whole->body)["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], reasoning);
  EXPECT_EQ(message["content"], content);
  auto stream = cli.Post("/v1/chat/completions", ask + R"(, "stream": true})", "application/json");
  ASSERT_TRUE(stream);
  const StreamedChat streamed = join_chat_stream(stream->body, no_tag);
  EXPECT_EQ(streamed.reasoning, reasoning);
  EXPECT_EQ(streamed.content, content);
}

// --reasoning-format deepseek (or a request's reasoning_format): a chat reply's <think> text comes as
// reasoning_content, the rest as content, whole or streamed one token at a time; "none" leaves it in content.
TEST(ServerHttp, ChatReasoningContentSplit) {
  FakeEngine engine;
  engine.set_script("<think>plan</think>Answer");
  ServerOptions opts;
  opts.split_reasoning = true;
  LiveServer server(engine, opts);
  auto cli = server.client();
  const std::string ask = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 25)";
  expect_chat_split(cli, ask, "<", "plan", "Answer");

  // Structured output with the split on: the grammar lets the model think first (a different grammar from
  // the one without the split).
  auto json_mode =
      cli.Post("/v1/chat/completions", ask + R"(, "response_format": {"type": "json_object"}})", "application/json");
  ASSERT_TRUE(json_mode);
  EXPECT_EQ(json_mode->status, 200) << json_mode->body;
  ASSERT_NE(engine.added().back().grammar, nullptr);
  EXPECT_NE(engine.added().back().grammar, json_object_grammar());
  auto json_plain = cli.Post("/v1/chat/completions",
                             ask + R"(, "reasoning_format": "none", "response_format": {"type": "json_object"}})",
                             "application/json");
  ASSERT_TRUE(json_plain);
  EXPECT_EQ(engine.added().back().grammar, json_object_grammar());

  // The request's own choice wins; a bad one is a 400.
  auto none = cli.Post("/v1/chat/completions", ask + R"(, "reasoning_format": "none"})", "application/json");
  ASSERT_TRUE(none);
  const json kept = json::parse(none->body)["choices"][0]["message"];
  EXPECT_EQ(kept["content"], "<think>plan</think>Answer");
  EXPECT_FALSE(kept.contains("reasoning_content"));
  expect_error(cli.Post("/v1/chat/completions", ask + R"(, "reasoning_format": "r1"})", "application/json"), 400,
               "reasoning_format");

  // A prompt that ends inside <think> (an R1 distill's template): the reply starts in its reasoning. (The
  // fake template writes the kwargs into the prompt.)
  FakeEngine opened;
  opened.set_script("plan</think>Answer");
  LiveServer opened_server(opened, opts);
  auto r1 = opened_server.client().Post(
      "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 18, "chat_template_kwargs": {"x": "<think>"}})",
      "application/json");
  ASSERT_TRUE(r1);
  const json r1_message = json::parse(r1->body)["choices"][0]["message"];
  EXPECT_EQ(r1_message["reasoning_content"], "plan");
  EXPECT_EQ(r1_message["content"], "Answer");
}

// gpt-oss's harmony replies (the prompt ends "<|start|>assistant"): with the split on, the analysis channel is
// reasoning_content and the final channel content, whole or streamed a token at a time; "none" keeps the raw text.
TEST(ServerHttp, ChatHarmonyChannelsSplit) {
  FakeEngine engine;
  const std::string reply =
      "<|channel|>analysis<|message|>plan<|end|><|start|>assistant<|channel|>final<|message|>Answer";
  engine.set_script(reply);
  engine.set_harmony(true);
  ServerOptions opts;
  opts.split_reasoning = true;
  LiveServer server(engine, opts);
  auto cli = server.client();
  const std::string ask =
      R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": )" + std::to_string(reply.size());
  expect_chat_split(cli, ask, "<|", "plan", "Answer");

  auto none = cli.Post("/v1/chat/completions", ask + R"(, "reasoning_format": "none"})", "application/json");
  ASSERT_TRUE(none);
  EXPECT_EQ(json::parse(none->body)["choices"][0]["message"]["content"], reply);

  // A harmony tool call (--tool-call-parser openai): the analysis is reasoning, the message to functions.NAME a
  // call, whole and streamed.
  FakeEngine calling(std::chrono::milliseconds(1), 4096);
  const std::string call_reply =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
  calling.set_script(call_reply);
  calling.set_stop_at_script_end(true);
  calling.set_harmony(true);
  opts.tool_call_parser = "openai";
  LiveServer tool_server(calling, opts);
  const std::string tool_ask =
      R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 500, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";
  expect_one_weather_call(tool_server.client().Post("/v1/chat/completions", tool_ask + "}", "application/json"),
                          "Need weather.", json({{"city", "Paris"}}));
  auto call_response =
      tool_server.client().Post("/v1/chat/completions", tool_ask + R"(, "stream": true})", "application/json");
  ASSERT_TRUE(call_response);
  const StreamedChat call_stream = join_chat_stream(call_response->body, "<|");
  EXPECT_EQ(call_stream.reasoning, "Need weather.");
  EXPECT_EQ(json::parse(call_stream.arguments), json({{"city", "Paris"}}));
  // tool_choice "required": the grammar of one call as gpt-oss writes it, an analysis message allowed first
  // under the reasoning split.
  const std::shared_ptr<const Grammar> grammar = forced_call_grammar(tool_server.client(), calling, tool_ask);
  ASSERT_NE(grammar, nullptr);
  EXPECT_TRUE(accepts(grammar, call_reply));
  EXPECT_TRUE(accepts(grammar, call_reply.substr(call_reply.find("<|channel|>commentary"))));
  EXPECT_FALSE(accepts(grammar, "<|channel|>final<|message|>Sunny."));
  EXPECT_FALSE(accepts(grammar, "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}"));
  // response_format under the split: the JSON in the final message, after an analysis message or none.
  auto formatted = tool_server.client().Post(
      "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "response_format": {"type": "json_object"}})",
      "application/json");
  ASSERT_TRUE(formatted);
  ASSERT_EQ(formatted->status, 200) << formatted->body;
  const std::shared_ptr<const Grammar> json_mode = calling.added().back().grammar;
  ASSERT_NE(json_mode, nullptr);
  EXPECT_TRUE(accepts(json_mode,
                      "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
                      "<|message|>{\"a\": 1}"));
  EXPECT_TRUE(accepts(json_mode, "<|channel|>final<|message|>{}"));
  EXPECT_FALSE(accepts(json_mode, "{}"));
  EXPECT_FALSE(accepts(json_mode, "<|channel|>final<|message|>Sure."));
}

// Gemma 4's tool calls (--tool-call-parser gemma4): the call comes back as tool_calls and its thought channel as
// reasoning_content; tool_choice "required" hands the engine the grammar of one call in Gemma 4's notation, a
// thought allowed before it.
TEST(ServerHttp, ChatGemma4ToolCalls) {
  FakeEngine engine(std::chrono::milliseconds(1), 4096);
  const std::string call = "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:2}<tool_call|>";
  const std::string reply = "<|channel>thought\nCheck the weather.<channel|>" + call;
  engine.set_script(reply);
  engine.set_stop_at_script_end(true);
  engine.set_gemma4(true);
  ServerOptions opts;
  opts.tool_call_parser = "gemma4";
  opts.split_reasoning = true;
  LiveServer server(engine, opts);
  const std::string ask =
      R"({"messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 500, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}}, "required": ["city"]}}}])";
  expect_one_weather_call(server.client().Post("/v1/chat/completions", ask + "}", "application/json"),
                          "Check the weather.", json({{"city", "Paris"}, {"days", 2}}));
  EXPECT_EQ(engine.added().back().grammar, nullptr);
  const std::shared_ptr<const Grammar> grammar = forced_call_grammar(server.client(), engine, ask);
  ASSERT_NE(grammar, nullptr);
  EXPECT_TRUE(accepts(grammar, reply));
  EXPECT_TRUE(accepts(grammar, call));
  EXPECT_FALSE(accepts(grammar, "<|channel>thought\nCheck.<channel|>Sunny."));
  EXPECT_FALSE(accepts(grammar, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:0}<tool_call|>"));
  // A schema the notation cannot enforce: refused by name.
  const std::string patterned =
      R"({"messages": [{"role": "user", "content": "Hi"}], "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"c": {"type": "string", "pattern": "^a$"}}}}}]})";
  auto refused = server.client().Post("/v1/chat/completions", patterned, "application/json");
  expect_error(refused, 400, "tool_choice");
  EXPECT_NE(refused->body.find("pattern"), std::string::npos) << refused->body;
}

// Llama 4's pythonic tool calls (--tool-call-parser llama4_pythonic): the reply's Python list of calls comes back
// as OpenAI's tool_calls, whole and streamed; a reply that is not such a list is text; tool_choice "required" gets the
// grammar of one call.
TEST(ServerHttp, ChatPythonicToolCalls) {
  FakeEngine engine(std::chrono::milliseconds(1), 4096);
  engine.set_script("<|python_start|>[get_weather(city='Paris', days=2), get_weather(city=\"Lyon\")]<|python_end|>");
  engine.set_stop_at_script_end(true);
  ServerOptions opts;
  opts.tool_call_parser = "llama4_pythonic";
  LiveServer server(engine, opts);
  const std::string ask =
      R"({"messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 500, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])";
  auto whole = server.client().Post("/v1/chat/completions", ask + "}", "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const json choice = json::parse(whole->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}, {"days", 2}}));
  EXPECT_EQ(json::parse(choice["message"]["tool_calls"][1]["function"]["arguments"].get<std::string>()),
            json({{"city", "Lyon"}}));
  auto stream = server.client().Post("/v1/chat/completions", ask + R"(, "stream": true})", "application/json");
  ASSERT_TRUE(stream);
  std::vector<json> streamed;
  for (const json& e : sse_events(stream->body)) {
    if (e == "[DONE]") continue;
    const json& delta = e["choices"][0]["delta"];
    EXPECT_FALSE(delta.contains("content") && !delta["content"].get<std::string>().empty()) << delta.dump();
    if (delta.contains("tool_calls"))
      for (const json& c : delta["tool_calls"]) streamed.push_back(c["function"]);
  }
  ASSERT_EQ(streamed.size(), 2u);
  EXPECT_EQ(streamed[1]["arguments"], choice["message"]["tool_calls"][1]["function"]["arguments"]);
  // tool_choice "required": the grammar of one call in the Python list.
  const std::shared_ptr<const Grammar> grammar = forced_call_grammar(server.client(), engine, ask);
  ASSERT_NE(grammar, nullptr);
  EXPECT_TRUE(accepts(grammar, R"([get_weather(city="Paris", days=2)])"));
  EXPECT_FALSE(accepts(grammar, "[get_weather(city='Paris', days=2), get_weather(city=\"Lyon\")]"));

  FakeEngine prose(std::chrono::milliseconds(1), 4096);
  prose.set_script("[1] Paris is sunny.");
  prose.set_stop_at_script_end(true);
  LiveServer prose_server(prose, opts);
  auto text = prose_server.client().Post("/v1/chat/completions", ask + "}", "application/json");
  ASSERT_TRUE(text);
  EXPECT_EQ(json::parse(text->body)["choices"][0]["message"]["content"], "[1] Paris is sunny.");
  EXPECT_EQ(json::parse(text->body)["choices"][0]["finish_reason"], "stop");
}

// Tool calls: a reply in the model's tool-call format comes back as OpenAI's tool_calls, whole (content null,
// finish_reason "tool_calls") and streamed (each call whole in one delta, the same call a client joins);
// tool_choice "none" leaves the reply as text; a model with no format the server reads is a 400.
TEST(ServerHttp, ChatToolCalls) {
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  FakeEngine engine(std::chrono::milliseconds(1), 4096);
  engine.set_script("Let me check.\n" + call + "\n" + call);
  engine.set_stop_at_script_end(true);
  ServerOptions opts;
  opts.tool_call_parser = "hermes";
  LiveServer server(engine, opts);
  auto cli = server.client();
  const std::string ask =
      R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 500, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";
  auto plain = cli.Post("/v1/chat/completions", ask + "}", "application/json");
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  const json choice = json::parse(plain->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Let me check.\n");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 2u);
  std::set<std::string> ids;
  for (const json& c : choice["message"]["tool_calls"]) {
    EXPECT_EQ(c["type"], "function");
    EXPECT_EQ(c["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(c["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
    const std::string id = c["id"];
    EXPECT_EQ(id.rfind("call_", 0), 0u) << id;
    EXPECT_EQ(id.size(), 29u) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 2u);
  // The template saw the tools (the fake's template writes its variables into the prompt).
  const std::vector<EngineRequest> sent = engine.added();
  ASSERT_FALSE(sent.empty());
  EXPECT_NE(engine.detokenize(sent.back().prompt_ids).find(R"("tools":[{"type":"function","function":{"name":"get_weather")"),
            std::string::npos);

  auto stream = cli.Post("/v1/chat/completions", ask + R"(, "stream": true})", "application/json");
  ASSERT_TRUE(stream);
  std::string content, finish;
  std::map<int, json> calls;
  for (const json& e : sse_events(stream->body)) {
    if (e == "[DONE]") continue;
    const json& delta = e["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls"))
      for (const json& c : delta["tool_calls"]) {
        EXPECT_FALSE(calls.count(c["index"])) << "one delta per call";
        calls[c["index"]] = c;
      }
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, "Let me check.\n");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), 2u);
  for (const auto& [index, c] : calls) {
    EXPECT_EQ(c["function"]["name"], "get_weather");
    EXPECT_EQ(c["function"]["arguments"], choice["message"]["tool_calls"][index]["function"]["arguments"]);
  }

  // parallel_tool_calls false: the first call only.
  auto one = cli.Post("/v1/chat/completions", ask + R"(, "parallel_tool_calls": false})", "application/json");
  ASSERT_TRUE(one);
  EXPECT_EQ(json::parse(one->body)["choices"][0]["message"]["tool_calls"].size(), 1u);

  // tool_choice "none": the reply as the model wrote it.
  auto none = cli.Post("/v1/chat/completions", ask + R"(, "tool_choice": "none"})", "application/json");
  ASSERT_TRUE(none);
  const json text = json::parse(none->body)["choices"][0];
  EXPECT_EQ(text["message"]["content"], "Let me check.\n" + call + "\n" + call);
  EXPECT_FALSE(text["message"].contains("tool_calls"));
  EXPECT_EQ(text["finish_reason"], "stop");

  // No tool-call format for this model's template (the fake's is empty): tools are a 400, unless not called.
  FakeEngine plain_model(std::chrono::milliseconds(1), 4096);
  LiveServer auto_server(plain_model, ServerOptions{});
  expect_error(auto_server.client().Post("/v1/chat/completions", ask + "}", "application/json"), 400, "tools");
  auto allowed = auto_server.client().Post("/v1/chat/completions", ask + R"(, "tool_choice": "none"})", "application/json");
  ASSERT_TRUE(allowed);
  EXPECT_EQ(allowed->status, 200) << allowed->body;
  // tool_choice naming a function (or "required"): the engine gets the grammar of one such call, in the
  // XML formats too.
  auto named = cli.Post("/v1/chat/completions",
                        ask + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})",
                        "application/json");
  ASSERT_TRUE(named);
  EXPECT_EQ(named->status, 200) << named->body;
  EXPECT_NE(engine.added().back().grammar, nullptr);
  EXPECT_EQ(json::parse(named->body)["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(engine.added()[0].grammar, nullptr);
  FakeEngine coder(std::chrono::milliseconds(1), 4096);
  ServerOptions coder_opts;
  coder_opts.tool_call_parser = "qwen3_coder";
  LiveServer coder_server(coder, coder_opts);
  auto coder_call =
      coder_server.client().Post("/v1/chat/completions", ask + R"(, "tool_choice": "required"})", "application/json");
  ASSERT_TRUE(coder_call);
  EXPECT_EQ(coder_call->status, 200) << coder_call->body;
  ASSERT_FALSE(coder.added().empty());
  EXPECT_NE(coder.added().back().grammar, nullptr);

  // With the reasoning split on, a call inside <think> is reasoning; the one after it is a call.
  FakeEngine thinking(std::chrono::milliseconds(1), 4096);
  thinking.set_script("<think>maybe " + call + "</think>\n\n" + call);
  thinking.set_stop_at_script_end(true);
  ServerOptions think_opts;
  think_opts.tool_call_parser = "hermes";
  think_opts.split_reasoning = true;
  LiveServer think_server(thinking, think_opts);
  auto thought = think_server.client().Post("/v1/chat/completions", ask + "}", "application/json");
  ASSERT_TRUE(thought);
  const json thought_message = json::parse(thought->body)["choices"][0]["message"];
  EXPECT_EQ(thought_message["reasoning_content"], "maybe " + call);
  EXPECT_TRUE(thought_message["content"].is_null());
  EXPECT_EQ(thought_message["tool_calls"].size(), 1u);

  // ... and --tool-call-parser auto reads the format from the template.
  FakeEngine qwen(std::chrono::milliseconds(1), 4096);
  qwen.set_chat_template("{% for tool in tools %}{{ tool | tojson }}{% endfor %}<tool_call>\n{\"name\": ...}\n</tool_call>");
  qwen.set_script(call);
  qwen.set_stop_at_script_end(true);
  LiveServer qwen_server(qwen, ServerOptions{});
  auto detected = qwen_server.client().Post("/v1/chat/completions", ask + "}", "application/json");
  ASSERT_TRUE(detected);
  EXPECT_EQ(json::parse(detected->body)["choices"][0]["message"]["tool_calls"].size(), 1u) << detected->body;
}

TEST(ServerHttp, CompletionStreamingLogprobs) {
  FakeEngine engine;
  LiveServer server(engine);
  auto res = server.client().Post("/v1/completions", R"({"prompt": "x", "max_tokens": 3, "stream": true, "logprobs": 2})",
                                  "application/json");
  ASSERT_TRUE(res);
  const std::vector<json> events = sse_events(res->body);
  ASSERT_GE(events.size(), 2u);
  std::vector<int> offsets;
  for (const json& e : events) {
    if (!e.is_object()) continue;
    EXPECT_FALSE(e.contains("usage"));  // include_usage not asked for
    const json& lp = e["choices"][0]["logprobs"];
    for (const json& o : lp["text_offset"]) offsets.push_back(o);
    for (const json& top : lp["top_logprobs"]) EXPECT_EQ(top.size(), 2u);
  }
  EXPECT_EQ(offsets, (std::vector<int>{0, 1, 2}));
}

// A list of prompts: one engine request each, n choices apiece numbered prompt * n + j, usage summed over the
// prompts; streamed the same. A prompt the engine refuses fails the request and withdraws those queued before.
TEST(ServerHttp, CompletionWithAListOfPrompts) {
  FakeEngine engine;
  engine.set_cached_tokens(1);
  LiveServer server(engine);
  auto cli = server.client();
  const std::string body = R"({"prompt": ["ab", [7, 8, 9]], "n": 2, "max_tokens": 3)";
  auto res = cli.Post("/v1/completions", body + "}", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json plain = json::parse(res->body);
  ASSERT_EQ(plain["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(plain["choices"][i]["index"], i);
    EXPECT_EQ(plain["choices"][i]["text"], "abc");
  }
  EXPECT_EQ(plain["usage"], json::parse(R"({"prompt_tokens": 5, "completion_tokens": 12, "total_tokens": 17,
                                            "prompt_tokens_details": {"cached_tokens": 2}})"));
  const auto added = engine.added();
  ASSERT_EQ(added.size(), 2u);
  EXPECT_EQ(added[0].prompt_ids, (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(added[1].prompt_ids, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(added[0].n, 2);
  EXPECT_NE(added[0].id, added[1].id);

  auto streamed = cli.Post("/v1/completions", body + R"(, "stream": true, "stream_options": {"include_usage": true}})",
                           "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  std::map<int, std::string> texts;
  std::map<int, std::string> finish;
  json usage;
  for (const json& e : sse_events(streamed->body)) {
    if (!e.is_object()) continue;
    if (!e["usage"].is_null()) usage = e["usage"];
    for (const json& c : e["choices"]) {
      texts[c["index"].get<int>()] += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish[c["index"].get<int>()] = c["finish_reason"];
    }
  }
  EXPECT_EQ(texts, (std::map<int, std::string>{{0, "abc"}, {1, "abc"}, {2, "abc"}, {3, "abc"}}));
  EXPECT_EQ(finish.size(), 4u);
  EXPECT_EQ(usage["prompt_tokens"], 5);
  EXPECT_EQ(usage["completion_tokens"], 12);

  // The second prompt and its max_tokens overflow the engine's context of 256.
  const size_t before = engine.added().size();
  auto refused =
      cli.Post("/v1/completions", R"({"prompt": ["ab", ")" + std::string(252, 'x') + R"("], "max_tokens": 5})",
               "application/json");
  expect_error(refused, 400, "prompt");
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->body.find("prompt 1: "), std::string::npos) << refused->body;
  const auto after = engine.added();
  ASSERT_EQ(after.size(), before + 1);
  EXPECT_TRUE(engine.was_aborted(after.back().id));
  expect_error(cli.Post("/v1/completions", R"({"prompt": ["ab", [1, 999]]})", "application/json"), 400, "prompt");
  EXPECT_EQ(engine.added().size(), before + 1);  // refused before any was queued
}

// echo: each choice's text starts with its prompt; with logprobs its tokens lead the logprobs, the first
// with a null logprob and null top_logprobs; streamed, the choice's first chunk carries them.
TEST(ServerHttp, CompletionEcho) {
  FakeEngine engine;
  LiveServer server(engine);
  auto cli = server.client();
  auto plain = cli.Post("/v1/completions", R"({"prompt": "hey", "max_tokens": 2, "echo": true})", "application/json");
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  EXPECT_EQ(json::parse(plain->body)["choices"][0]["text"], "heyab");
  EXPECT_EQ(engine.added().back().params.prompt_logprobs, -1);

  const std::string scored = R"({"prompt": ["hey", "yo"], "max_tokens": 1, "echo": true, "logprobs": 1)";
  auto res = cli.Post("/v1/completions", scored + "}", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json body = json::parse(res->body);
  EXPECT_EQ(engine.added().back().params.prompt_logprobs, 1);
  ASSERT_EQ(body["choices"].size(), 2u);
  const json& c = body["choices"][0];
  EXPECT_EQ(c["text"], "heya");
  const json& lp = c["logprobs"];
  EXPECT_EQ(lp["tokens"], json::parse(R"(["h", "e", "y", "a"])"));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_NEAR(lp["token_logprobs"][1].get<double>(), -0.1, 1e-6);
  EXPECT_NEAR(lp["token_logprobs"][2].get<double>(), -0.2, 1e-6);
  EXPECT_NEAR(lp["token_logprobs"][3].get<double>(), -0.5, 1e-6);
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"][1].size(), 1u);
  EXPECT_EQ(lp["text_offset"], json::parse("[0, 1, 2, 3]"));
  EXPECT_EQ(body["choices"][1]["text"], "yoa");
  EXPECT_EQ(body["choices"][1]["logprobs"]["tokens"].size(), 3u);

  auto streamed = cli.Post("/v1/completions", scored + R"(, "stream": true})", "application/json");
  ASSERT_TRUE(streamed);
  std::map<int, std::string> texts;
  std::map<int, json> token_lps;
  for (const json& e : sse_events(streamed->body)) {
    if (!e.is_object()) continue;
    for (const json& ch : e["choices"]) {
      const int i = ch["index"];
      texts[i] += ch["text"].get<std::string>();
      if (!ch["logprobs"].is_null())
        for (const json& v : ch["logprobs"]["token_logprobs"]) token_lps[i].push_back(v);
    }
  }
  EXPECT_EQ(texts, (std::map<int, std::string>{{0, "heya"}, {1, "yoa"}}));
  ASSERT_EQ(token_lps[0].size(), 4u);
  EXPECT_TRUE(token_lps[0][0].is_null());
  EXPECT_EQ(token_lps[1].size(), 3u);

  // vLLM's prompt_logprobs: on each completions choice, and at the top of a chat reply.
  auto with_prompt =
      cli.Post("/v1/completions", R"({"prompt": "hey", "max_tokens": 1, "prompt_logprobs": 1})", "application/json");
  ASSERT_TRUE(with_prompt);
  ASSERT_EQ(with_prompt->status, 200) << with_prompt->body;
  const json pl = json::parse(with_prompt->body)["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(pl.size(), 3u);
  EXPECT_TRUE(pl[0].is_null());
  EXPECT_NEAR(pl[2]["121"]["logprob"].get<double>(), -0.2, 1e-6);  // 'y'
  EXPECT_EQ(pl[2]["121"]["decoded_token"], "y");
  EXPECT_EQ(pl[2]["81"]["rank"], 1);                                     // the alternative 'Q'
  EXPECT_EQ(json::parse(with_prompt->body)["choices"][0]["text"], "a");  // no echo
  auto chat = cli.Post("/v1/chat/completions",
                       R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "prompt_logprobs": 0})",
                       "application/json");
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  EXPECT_TRUE(json::parse(chat->body)["prompt_logprobs"].is_array());

  // max_tokens 0: the prompt alone (OpenAI's legacy scoring request); without echo a 400.
  auto only = cli.Post("/v1/completions", R"({"prompt": "hey", "max_tokens": 0, "echo": true, "logprobs": 0})",
                       "application/json");
  ASSERT_TRUE(only);
  ASSERT_EQ(only->status, 200) << only->body;
  const json o = json::parse(only->body);
  EXPECT_EQ(o["choices"][0]["text"], "hey");
  EXPECT_EQ(o["choices"][0]["logprobs"]["token_logprobs"].size(), 3u);
  EXPECT_EQ(o["usage"]["completion_tokens"], 0);
  expect_error(cli.Post("/v1/completions", R"({"prompt": "hey", "max_tokens": 0})", "application/json"), 400,
               "max_tokens");
}

TEST(ServerHttp, BadRequestsGet4xxAndServingContinues) {
  FakeEngine engine(1ms, /*context=*/64);
  ServerOptions opts;
  opts.max_body_bytes = 1 << 20;
  LiveServer server(engine, opts);
  auto cli = server.client();
  expect_error(cli.Post("/v1/completions", "{\"prompt\": ", "application/json"), 400);
  expect_error(cli.Post("/v1/completions", R"({"prompt": "x", "max_tokens": "ten"})", "application/json"), 400, "max_tokens");
  expect_error(cli.Post("/v1/completions", R"({"prompt": "x", "max_tokens": -5})", "application/json"), 400, "max_tokens");
  expect_error(cli.Post("/v1/completions", R"({"prompt": "x", "temperature": 9})", "application/json"), 400, "temperature");
  expect_error(cli.Post("/v1/chat/completions", R"({"messages": [], "n": 1})", "application/json"), 400, "messages");
  expect_error(cli.Post("/v1/completions", R"({"prompt": "x", "n": 100})", "application/json"), 400, "n");
  expect_error(cli.Post("/v1/completions", R"({"prompt": "x", "model": "gpt-9"})", "application/json"), 404, "model");
  // Longer than the context: caught before the engine.
  expect_error(cli.Post("/v1/completions", json{{"prompt", std::string(100, 'x')}}.dump(), "application/json"), 400);
  // Fits the context alone but not with max_tokens: the engine refuses it, the server maps it to 400.
  expect_error(cli.Post("/v1/completions", R"({"prompt": "xxxx", "max_tokens": 100})", "application/json"), 400);
  expect_error(cli.Post("/v1/completions", std::string(2 << 20, ' '), "application/json"), 413);

  auto ok = cli.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["text"], "ab");
}

TEST(ServerHttp, ApiKeyGuardsV1AndSaltsTheCache) {
  FakeEngine engine;
  ServerOptions opts;
  opts.api_key = "sekret";
  LiveServer server(engine, opts);
  const std::string body = R"({"prompt": "x", "max_tokens": 1, "cache_salt": "t1"})";
  expect_error(server.client().Post("/v1/completions", body, "application/json"), 401);
  expect_error(server.client("wrong").Post("/v1/completions", body, "application/json"), 401);
  expect_error(server.client("sekret-and-more").Get("/v1/models"), 401);
  auto health = server.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto ok = server.client("sekret").Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  const auto added = engine.added();
  ASSERT_EQ(added.size(), 1u);
  EXPECT_EQ(added[0].cache_salt, derive_cache_salt("sekret", false, "t1"));
}

TEST(ServerHttp, TokenizeAndDetokenizeRoundTripBehindTheApiKey) {
  FakeEngine engine;
  engine.set_bos(true);
  ServerOptions opts;
  opts.api_key = "sekret";
  LiveServer server(engine, opts);
  auto cli = server.client("sekret");
  auto tok = cli.Post("/tokenize", R"({"prompt": "hi"})", "application/json");
  ASSERT_TRUE(tok);
  ASSERT_EQ(tok->status, 200) << tok->body;
  const json t = json::parse(tok->body);
  EXPECT_EQ(t["tokens"], json({1, 'h', 'i'}));
  EXPECT_EQ(t["count"], 3);
  EXPECT_EQ(t["max_model_len"], engine.context_length());
  auto plain = cli.Post("/tokenize", R"({"content": "hi", "add_special_tokens": false})", "application/json");
  ASSERT_TRUE(plain);
  EXPECT_EQ(json::parse(plain->body)["tokens"], json({'h', 'i'}));
  // Chat messages go through the template, as /v1/chat/completions renders them.
  auto chat = cli.Post("/tokenize", R"({"messages": [{"role": "user", "content": "a"}]})", "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(json::parse(chat->body)["count"], engine.tokenize("user: a\nassistant:", true).size());
  // ... with the request's chat_template_kwargs.
  auto with_kwargs =
      cli.Post("/tokenize", R"({"messages": [{"role": "user", "content": "a"}], "chat_template_kwargs": {"x": 1}})",
               "application/json");
  ASSERT_TRUE(with_kwargs);
  EXPECT_EQ(json::parse(with_kwargs->body)["count"],
            engine.tokenize("kwargs: {\"x\":1}\nuser: a\nassistant:", true).size());

  auto detok = cli.Post("/detokenize", json{{"tokens", t["tokens"]}}.dump(), "application/json");
  ASSERT_TRUE(detok);
  ASSERT_EQ(detok->status, 200) << detok->body;
  EXPECT_EQ(json::parse(detok->body)["prompt"], "hi");
  EXPECT_EQ(json::parse(detok->body)["content"], "hi");

  expect_error(cli.Post("/detokenize", R"({"tokens": [999]})", "application/json"), 400);
  expect_error(cli.Post("/tokenize", R"({"prompt": "x", "model": "other"})", "application/json"), 404);
  expect_error(server.client().Post("/tokenize", R"({"prompt": "hi"})", "application/json"), 401);
  expect_error(server.client("wrong").Post("/detokenize", R"({"tokens": [1]})", "application/json"), 401);
  EXPECT_TRUE(engine.added().empty());  // nothing reached the engine's queue
}

TEST(ServerHttp, MetricsAndBlockMap) {
  FakeEngine engine;
  LiveServer server(engine);
  auto cli = server.client();
  ASSERT_TRUE(cli.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 3})", "application/json"));
  auto bad = cli.Post("/v1/completions", "{not json", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("kvserve_e2e_request_latency_seconds_count 1\n"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("kvserve_kv_blocks{state=\"cached\"} 1\n"), std::string::npos);
  // Each response is counted before it is sent, so /metrics right after it sees it.
  EXPECT_NE(metrics->body.find("kvserve_http_requests_total{status=\"2xx\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("kvserve_http_requests_total{status=\"4xx\"} 1\n"), std::string::npos);
  auto blocks = cli.Get("/v1/kv/blocks");
  ASSERT_TRUE(blocks);
  const json map = json::parse(blocks->body);
  EXPECT_EQ(map["owner"].size(), 8u);
  EXPECT_EQ(map["num_blocks"], 8);
  EXPECT_DOUBLE_EQ(map["prefix_hit_rate"].get<double>(), 0.4);
}

// Opens a raw connection, sends `request`, reads until `min_bytes` arrived, then closes the socket.
std::string send_and_hang_up(int port, const std::string& request, size_t min_bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    while (got.size() < min_bytes) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return got;
}

std::string post_request(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

TEST(ServerHttp, ClientDisconnectMidStreamAbortsTheRequest) {
  FakeEngine engine(10ms, /*context=*/1 << 20);
  LiveServer server(engine);
  const std::string got = send_and_hang_up(
      server.port(), post_request("/v1/completions", R"({"prompt": "x", "max_tokens": 100000, "stream": true})"), 600);
  ASSERT_NE(got.find("data: {"), std::string::npos) << got;
  const auto added = engine.added();
  ASSERT_EQ(added.size(), 1u);
  EXPECT_TRUE(wait_for([&] { return engine.was_aborted(added[0].id); }, 3s));
  EXPECT_TRUE(wait_for([&] { return engine.live_requests() == 0; }, 3s));
}

TEST(ServerHttp, ClientDisconnectWhileWaitingForPlainResponseAborts) {
  FakeEngine engine(10ms, /*context=*/1 << 20);
  LiveServer server(engine);
  // Non-streaming: nothing arrives until the probes start; hang up as soon as one space came back.
  const std::string got =
      send_and_hang_up(server.port(), post_request("/v1/completions", R"({"prompt": "x", "max_tokens": 100000})"), 1);
  ASSERT_FALSE(got.empty());
  const auto added = engine.added();
  ASSERT_EQ(added.size(), 1u);
  EXPECT_TRUE(wait_for([&] { return engine.was_aborted(added[0].id); }, 5s));
}

TEST(ServerHttp, ManyConcurrentStreams) {
  FakeEngine engine(5ms);
  LiveServer server(engine);
  constexpr int kClients = 12;  // LiveServer uses 16 worker threads
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&] {
      auto res = server.client().Post("/v1/completions", R"({"prompt": "x", "max_tokens": 20, "stream": true})",
                                      "application/json");
      if (res && res->status == 200 && sse_events(res->body).back() == "[DONE]") ok++;
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok, kClients);
}

}  // namespace
}  // namespace kvserve::server

#endif  // KVSERVE_HAVE_HTTPLIB
