// Tool calls read out of chat replies (src/server/tool_call_parser.h): each format whole; the same parts
// when the reply comes in every split into two pieces and one byte at a time; a reply without calls is its
// content unchanged; and every real chat template's own rendering of a call (jinja2's, from
// tests/golden/chat_templates/jinja2_render.json) reads back as that call.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "grammar_checks.h"
#include "model/model_cache.h"
#include "server/tool_call_parser.h"

namespace kvserve::server {
namespace {

using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
    "hours": {"type": ["array", "null"]}, "note": {"type": "string"}}}}}])");

struct Case {
  ToolCallFormat format;
  std::string reply;
  std::string content;
  std::vector<ParsedToolCall> calls;
};

const std::vector<Case> kCases = {
    // hermes: Qwen2.5 / Qwen3 / Hermes; text before a call is content, the newlines between calls are not.
    {ToolCallFormat::Hermes,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "",
     {{"get_weather", R"({"city":"Paris"})"}}},
    {ToolCallFormat::Hermes,
     "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1, \"b\": [2]}}\n</tool_call>\n"
     "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
     "Let me check.\n",
     {{"a", R"({"x":1,"b":[2]})"}, {"b", "{}"}}},
    // Unclosed at the end of the reply (the model stopped there): still a call when it parses.
    {ToolCallFormat::Hermes,
     "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"</tool\"}}",
     "",
     {{"a", R"({"q":"</tool"})"}}},
    // Arguments written as JSON text, and "parameters" for "arguments".
    {ToolCallFormat::Hermes,
     "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"k\\\": 2}\"}</tool_call>",
     "",
     {{"a", R"({"k":2})"}}},
    {ToolCallFormat::Hermes,
     "<tool_call>{\"name\": \"a\", \"parameters\": {\"k\": null}}</tool_call> done",
     " done",
     {{"a", R"({"k":null})"}}},
    // A block that does not parse stays as the model wrote it.
    {ToolCallFormat::Hermes,
     "x <tool_call>{\"name\": 3}</tool_call> y",
     "x <tool_call>{\"name\": 3}</tool_call> y",
     {}},
    {ToolCallFormat::Hermes, "\n<tool_call>not json</tool_call>\n", "\n<tool_call>not json</tool_call>\n", {}},
    {ToolCallFormat::Hermes, "\n\n", "\n\n", {}},
    {ToolCallFormat::Hermes, "a <tool_cal", "a <tool_cal", {}},
    {ToolCallFormat::Hermes, "<tool_call>{\"name\": \"a\"", "<tool_call>{\"name\": \"a\"", {}},
    // qwen3_coder: every value is text; the schema's types make numbers, booleans and arrays of them.
    {ToolCallFormat::Qwen3Coder,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
     "<parameter=metric>\ntrue\n</parameter>\n<parameter=hours>\n[1, 2]\n</parameter>\n<parameter=note>\n42\n"
     "</parameter>\n</function>\n</tool_call>",
     "",
     {{"get_weather", R"({"city":"Paris","days":3,"metric":true,"hours":[1,2],"note":"42"})"}}},
    {ToolCallFormat::Qwen3Coder,
     "<think>\n\n</think>\n\n<tool_call>\n<function=f>\n</function>\n</tool_call>",
     "<think>\n\n</think>\n\n",
     {{"f", "{}"}}},
    // A value without its </parameter> ends at the next parameter (vLLM reads it so too).
    {ToolCallFormat::Qwen3Coder,
     "<tool_call><function=f><parameter=a>x<parameter=b>y</function></tool_call>",
     "",
     {{"f", R"({"a":"x","b":"y"})"}}},
    {ToolCallFormat::Qwen3Coder,
     "<tool_call><function=f><junk></function></tool_call>",
     "<tool_call><function=f><junk></function></tool_call>",
     {}},
    // glm45
    {ToolCallFormat::Glm45,
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
     "<arg_value>2</arg_value>\n</tool_call>",
     "",
     {{"get_weather", R"({"city":"Paris","days":2})"}}},
    {ToolCallFormat::Glm45, "<tool_call>f</tool_call>", "", {{"f", "{}"}}},
    {ToolCallFormat::Glm45,
     "<tool_call>f<arg_key>a</arg_key></tool_call>",
     "<tool_call>f<arg_key>a</arg_key></tool_call>",
     {}},
    // llama3_json: only a reply that is calls; several separated by ';'.
    {ToolCallFormat::Llama3Json,
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
     "",
     {{"get_weather", R"({"city":"Paris"})"}}},
    {ToolCallFormat::Llama3Json,
     "\n<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"s\": \"}{;\"}}",
     "",
     {{"a", "{}"}, {"b", R"({"s":"}{;"})"}}},
    {ToolCallFormat::Llama3Json,
     "<|python_start|>{\"name\": \"a\", \"parameters\": {\"k\": 1}}<|python_end|>",
     "",
     {{"a", R"({"k":1})"}}},
    {ToolCallFormat::Llama3Json, "<|python_sta", "<|python_sta", {}},
    {ToolCallFormat::Llama3Json, "{\"answer\": 42}", "{\"answer\": 42}", {}},
    {ToolCallFormat::Llama3Json,
     "The JSON is {\"name\": \"a\", \"parameters\": {}}",
     "The JSON is {\"name\": \"a\", \"parameters\": {}}",
     {}},
    {ToolCallFormat::Llama3Json,
     "<|python_tag|>brave_search.call(query=\"x\")",
     "<|python_tag|>brave_search.call(query=\"x\")",
     {}},
    {ToolCallFormat::Llama3Json, "<|pyth", "<|pyth", {}},
    {ToolCallFormat::Llama3Json,
     "{\"name\": \"a\", \"parameters\": {}} trailing",
     "{\"name\": \"a\", \"parameters\": {}} trailing",
     {}},
    // mistral: Nemo's JSON list, and v11's NAME[ARGS]{...} (with [CALL_ID] in v13).
    {ToolCallFormat::Mistral,
     "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
     "",
     {{"a", R"({"x":1})"}, {"b", "{}"}}},
    {ToolCallFormat::Mistral,
     "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]b[CALL_ID]abc123XYZ[ARGS]{}",
     "Sure.",
     {{"get_weather", R"({"city":"Paris"})"}, {"b", "{}"}}},
    {ToolCallFormat::Mistral, "[TOOL_CALLS]a b[ARGS]{}", "[TOOL_CALLS]a b[ARGS]{}", {}},
    {ToolCallFormat::Mistral, "no calls [TOOL", "no calls [TOOL", {}},
    // openai (gpt-oss's harmony): a message to functions.NAME is a call, its body the arguments; other messages,
    // and calls to its built-in tools, are text as written (the reasoning split, when on, has already taken the
    // analysis out and left only such messages whole).
    {ToolCallFormat::Harmony,
     "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
     "<|constrain|>json<|message|>{\"city\": \"Paris\"}",
     "<|channel|>analysis<|message|>think<|end|>",
     {{"get_weather", R"({"city":"Paris"})"}}},
    {ToolCallFormat::Harmony,
     "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"days\": 2}",
     "",
     {{"get_weather", R"({"days":2})"}}},
    {ToolCallFormat::Harmony,
     "Checking.<|start|>assistant to=functions.a<|channel|>commentary json<|message|>{}<|call|>"
     "<|start|>assistant to=functions.b<|channel|>commentary json<|message|>{\"x\": [1]}<|end|>",
     "Checking.",
     {{"a", "{}"}, {"b", R"({"x":[1]})"}}},
    {ToolCallFormat::Harmony,
     "<|channel|>analysis to=browser.search<|message|>{\"q\": 1}",
     "<|channel|>analysis to=browser.search<|message|>{\"q\": 1}",
     {}},
    {ToolCallFormat::Harmony,
     "<|channel|>commentary to=functions.a<|message|>not json<|end|>after",
     "<|channel|>commentary to=functions.a<|message|>not json<|end|>after",
     {}},
    {ToolCallFormat::Harmony, "Hello <|chan", "Hello <|chan", {}},
    {ToolCallFormat::Harmony, "<|channel|>commentary to=functions.a", "<|channel|>commentary to=functions.a", {}},
    // pythonic: only a reply that is a Python list of calls; keyword arguments of Python literals.
    {ToolCallFormat::Pythonic,
     "[get_weather(city='Paris', days=3, metric=True, hours=None, note=\"it's\")]",
     "",
     {{"get_weather", R"({"city":"Paris","days":3,"metric":true,"hours":null,"note":"it's"})"}}},
    {ToolCallFormat::Pythonic,
     "\n<|python_start|>[a(x=[1, -2.5, (3,)], y={'k': \"v\", 1: False}), b()]<|python_end|>",
     "",
     {{"a", R"({"x":[1,-2.5,[3]],"y":{"k":"v","1":false}})"}, {"b", "{}"}}},
    {ToolCallFormat::Pythonic,
     R"([a(s='''x
y''', r=r'\d+', u='\u00e9\n\x41\101', j="a" 'b')])",
     "",
     {{"a", R"({"s":"x\ny","r":"\\d+","u":"é\nAA","j":"ab"})"}}},
    {ToolCallFormat::Pythonic, "[a(1)]", "[a(1)]", {}},      // positional: not a call
    {ToolCallFormat::Pythonic, "[a(x=y)]", "[a(x=y)]", {}},  // a name, not a literal
    {ToolCallFormat::Pythonic, "[a(x=1)] and more", "[a(x=1)] and more", {}},
    {ToolCallFormat::Pythonic, "[1] The first point.", "[1] The first point.", {}},
    {ToolCallFormat::Pythonic, "Call [a(x=1)]", "Call [a(x=1)]", {}},  // not at the start: text
    {ToolCallFormat::Pythonic, "<|python_st", "<|python_st", {}},
    // gemma4: <|tool_call>call:NAME{...}<tool_call|> blocks, strings between <|"|> quotes as they are.
    {ToolCallFormat::Gemma4,
     "<|tool_call>call:get_weather{city:<|\"|>Paris, \"FR\"\n<|\"|>,days:3,metric:true,hours:null,t:-2.5e1}"
     "<tool_call|>",
     "",
     {{"get_weather", R"({"city":"Paris, \"FR\"\n","days":3,"metric":true,"hours":null,"t":-25.0})"}}},
    {ToolCallFormat::Gemma4,
     "Checking.\n<|tool_call>call:a{x:[1, <|\"|>b<|\"|>, {k:[]}], <|\"|>y<|\"|>: {}}<tool_call|>\n"
     "<|tool_call>call:b{}<tool_call|>",
     "Checking.\n",
     {{"a", R"({"x":[1,"b",{"k":[]}],"y":{}})"}, {"b", "{}"}}},
    {ToolCallFormat::Gemma4, "<|tool_call>call:a{x:1}", "", {{"a", R"({"x":1})"}}},  // the reply ended there
    {ToolCallFormat::Gemma4, "<|tool_call>call:a{x:y}<tool_call|>", "<|tool_call>call:a{x:y}<tool_call|>", {}},
    {ToolCallFormat::Gemma4, "<|tool_call>call:a{x:1}}<tool_call|>", "<|tool_call>call:a{x:1}}<tool_call|>", {}},
    {ToolCallFormat::Gemma4, "<|tool_call>a{x:1}<tool_call|>", "<|tool_call>a{x:1}<tool_call|>", {}},
    {ToolCallFormat::Gemma4,
     "<|tool_call>call:a{x:<|\"|>open}<tool_call|>",
     "<|tool_call>call:a{x:<|\"|>open}<tool_call|>",
     {}},
    {ToolCallFormat::Gemma4, "Hello <|tool_ca", "Hello <|tool_ca", {}},
    // none: the reply as it is.
    {ToolCallFormat::None, "<tool_call>{\"name\": \"a\"}</tool_call>", "<tool_call>{\"name\": \"a\"}</tool_call>", {}},
};

std::string describe(const Case& c) {
  return std::string(tool_call_format_name(c.format)) + ": " + c.reply;
}

void expect_piece(const ToolCallPiece& got, const Case& c, const std::string& how) {
  EXPECT_EQ(got.content, c.content) << describe(c) << " (" << how << ")";
  ASSERT_EQ(got.calls.size(), c.calls.size()) << describe(c) << " (" << how << ")";
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, c.calls[i].name) << describe(c);
    EXPECT_EQ(got.calls[i].arguments, c.calls[i].arguments) << describe(c);
  }
}

void append(ToolCallPiece& to, ToolCallPiece from) {
  to.content += from.content;
  for (ParsedToolCall& call : from.calls) to.calls.push_back(std::move(call));
}

TEST(ToolCallParser, WholeReply) {
  for (const Case& c : kCases) expect_piece(parse_tool_calls(c.format, kTools, c.reply), c, "whole");
}

TEST(ToolCallParser, EveryTwoPieceSplitAndByteByByte) {
  for (const Case& c : kCases) {
    for (size_t cut = 0; cut <= c.reply.size(); ++cut) {
      ToolCallParser parser(c.format, kTools);
      ToolCallPiece got = parser.feed(c.reply.substr(0, cut));
      append(got, parser.feed(c.reply.substr(cut)));
      append(got, parser.finish());
      expect_piece(got, c, "cut at " + std::to_string(cut));
      EXPECT_EQ(parser.called(), !c.calls.empty());
    }
    ToolCallParser parser(c.format, kTools);
    ToolCallPiece got;
    for (char ch : c.reply) append(got, parser.feed(std::string_view(&ch, 1)));
    append(got, parser.finish());
    expect_piece(got, c, "byte by byte");
  }
}

// A stream gives out text as soon as it cannot be a call: what a client sees while the model writes.
TEST(ToolCallParser, HoldsBackOnlyWhatMayBecomeACall) {
  ToolCallParser hermes(ToolCallFormat::Hermes, kTools);
  EXPECT_EQ(hermes.feed("Checking").content, "Checking");
  EXPECT_EQ(hermes.feed(" now <tool").content, " now ");
  EXPECT_EQ(hermes.feed("_call>{\"name\": \"a\"").content, "");
  const ToolCallPiece call = hermes.feed("}</tool_call>");
  ASSERT_EQ(call.calls.size(), 1u);
  EXPECT_EQ(call.calls[0].name, "a");
  EXPECT_EQ(hermes.feed("\n").content, "");  // may be the newline before another call
  EXPECT_EQ(hermes.feed("Done").content, "\nDone");

  ToolCallParser llama(ToolCallFormat::Llama3Json, kTools);
  EXPECT_EQ(llama.feed("Paris is").content, "Paris is");
  EXPECT_EQ(llama.feed(" {\"name\"").content, " {\"name\"");  // not at the start: text
}

// A reply that makes no call comes out unchanged, in every format, however it is cut.
TEST(ToolCallParser, RepliesWithoutCallsAreUnchanged) {
  const std::vector<std::string> replies = {"",
                                            " ",
                                            "plain text",
                                            "<tool_call>",
                                            "</tool_call>",
                                            "<tool_call></tool_call>",
                                            "[TOOL_CALLS]",
                                            "[TOOL_CALLS][]",
                                            "{",
                                            "{}",
                                            "{\"name\": 1}",
                                            "<|python_tag|>",
                                            " \n<tool_call>\n\n",
                                            "[TOOL_CALLS]x[ARGS]",
                                            "x[ARGS]{}",
                                            "<tool_call><function=></function></tool_call>",
                                            "\xff\xfe<tool_call>\x80",
                                            "<tool_call>{\"name\":\"a\"}}</tool_call>",
                                            "[",
                                            "[]",
                                            "[a(",
                                            "[a()",
                                            "[a(x=1,,)]",
                                            "<|python_start|>",
                                            "[a(x=1, x=2)]",
                                            "[a.b(x=1)]",
                                            "[a(x={1, 2})]"};
  for (ToolCallFormat format :
       {ToolCallFormat::Hermes, ToolCallFormat::Qwen3Coder, ToolCallFormat::Glm45, ToolCallFormat::Llama3Json,
        ToolCallFormat::Mistral, ToolCallFormat::Pythonic, ToolCallFormat::Gemma4}) {
    for (const std::string& reply : replies) {
      const ToolCallPiece got = parse_tool_calls(format, kTools, reply);
      EXPECT_EQ(got.content, reply) << tool_call_format_name(format) << ": " << reply;
      EXPECT_TRUE(got.calls.empty()) << tool_call_format_name(format) << ": " << reply;
    }
  }
}

TEST(ToolCallParser, FormatNames) {
  for (ToolCallFormat f : {ToolCallFormat::None, ToolCallFormat::Hermes, ToolCallFormat::Qwen3Coder,
                           ToolCallFormat::Glm45, ToolCallFormat::Llama3Json, ToolCallFormat::Mistral,
                           ToolCallFormat::Harmony, ToolCallFormat::Pythonic, ToolCallFormat::Gemma4})
    EXPECT_EQ(tool_call_format_named(tool_call_format_name(f)), f);
  // vLLM's Llama 4 names for the same parsers.
  EXPECT_EQ(tool_call_format_named("llama4_pythonic"), ToolCallFormat::Pythonic);
  EXPECT_EQ(tool_call_format_named("llama4_json"), ToolCallFormat::Llama3Json);
  EXPECT_EQ(tool_call_format_name(ToolCallFormat::Pythonic), "pythonic");
  EXPECT_EQ(tool_call_format_named("auto"), std::nullopt);
  EXPECT_EQ(tool_call_format_named("Hermes"), std::nullopt);
}

json read_golden() {
  std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/chat_templates/jinja2_render.json");
  if (!in) return json();
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

// One of llama.cpp's real templates (installed by scripts/fetch_llama_cpp_vocab.sh); "" and a failure when missing.
std::string read_template(const std::string& file) {
  const std::filesystem::path path =
      std::filesystem::path(model_cache_dir()) / "llama.cpp-vocab-0.3.36" / "templates" / file;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "missing " << path << " (run scripts/fetch_llama_cpp_vocab.sh)";
    return {};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The call as each real template writes it into the conversation (jinja2's rendering), read back by the
// format detected from that template: the template's own format, with the template as the reference.
TEST(ToolCallParser, EveryRealTemplatesOwnCallReadsBack) {
  const json golden = read_golden();
  ASSERT_FALSE(golden.is_null());
  const json& conversations = golden.at("conversations");
  size_t with_call = 0;
  for (; with_call < conversations.size(); ++with_call)
    if (conversations[with_call].at("messages").size() > 1 &&
        conversations[with_call]["messages"][1].contains("tool_calls"))
      break;
  ASSERT_LT(with_call, conversations.size());
  ASSERT_EQ(conversations[with_call]["messages"][1]["tool_calls"][0]["function"]["name"], "get_weather");

  std::map<ToolCallFormat, int> read_back;
  int detected = 0;
  for (const json& c : golden.at("cases")) {
    if (!c.contains("file")) continue;
    const std::string source = read_template(c.at("file").get<std::string>());
    if (source.empty()) continue;
    const ToolCallFormat format = detect_tool_call_format(source);
    if (format == ToolCallFormat::None) continue;
    ++detected;
    const json& rendered = c.at("rendered").at(with_call);
    if (!rendered.is_string()) continue;  // the template refuses this conversation (Mistral's 9-letter ids)
    const std::string text = rendered.get<std::string>();
    // The assistant's turn: from the call's opening to where the template ends it.
    const size_t user = text.rfind("Weather in Paris?");
    ASSERT_NE(user, std::string::npos) << c.at("file");
    std::string turn;
    if (format == ToolCallFormat::Llama3Json) {
      const size_t start = text.find("{\"name\"", user), end = text.find("<|eot_id|>", start);
      turn = text.substr(start, end - start);
    } else if (format == ToolCallFormat::Mistral) {
      const size_t start = text.find("[TOOL_CALLS]", user), end = text.find("</s>", start);
      turn = text.substr(start, end - start);
    } else if (format == ToolCallFormat::Gemma4) {
      const size_t start = text.find("<|tool_call>", user), end = text.find("<tool_call|>", start);
      turn = text.substr(start, end + std::string("<tool_call|>").size() - start);
    } else if (format == ToolCallFormat::Harmony) {
      const size_t start = text.find("<|start|>assistant to=", user), end = text.find("<|call|>", start);
      turn = text.substr(start, end + std::string("<|call|>").size() - start);
    } else {
      const size_t start = text.find("<tool_call>", user), end = text.find("</tool_call>", start);
      turn = text.substr(start, end + std::string("</tool_call>").size() - start);
    }
    const ToolCallPiece got = parse_tool_calls(format, kTools, turn);
    ASSERT_EQ(got.calls.size(), 1u) << c.at("file") << ": " << turn;
    // The grammar of a forced call (tool_choice "required") allows the template's own call.
    if (format == ToolCallFormat::Gemma4 || format == ToolCallFormat::Hermes || format == ToolCallFormat::Qwen3Coder) {
      const nlohmann::ordered_json weather = nlohmann::ordered_json::parse(kTools.dump())[0];
      EXPECT_TRUE(accepts(forced_tool_call_grammar(format, nlohmann::ordered_json::array({weather}), source), turn))
          << c.at("file") << ": " << turn;
    }
    EXPECT_EQ(got.calls[0].name, "get_weather") << c.at("file");
    EXPECT_EQ(got.calls[0].arguments, R"({"city":"Paris"})") << c.at("file");
    EXPECT_EQ(got.content, "") << c.at("file");
    ++read_back[format];
  }
  EXPECT_GE(detected, 24);
  for (ToolCallFormat f : {ToolCallFormat::Hermes, ToolCallFormat::Qwen3Coder, ToolCallFormat::Glm45,
                           ToolCallFormat::Llama3Json, ToolCallFormat::Mistral})
    EXPECT_GE(read_back[f], 2) << tool_call_format_name(f);
  EXPECT_EQ(read_back[ToolCallFormat::Harmony], 1);  // gpt-oss
  EXPECT_EQ(read_back[ToolCallFormat::Gemma4], 2);   // Gemma 4 31B, and its interleaved-thinking variant
}

TEST(ToolCallParser, DetectsTheFormatOfKnownTemplates) {
  const std::vector<std::pair<std::string, ToolCallFormat>> known = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::Hermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::Hermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::Hermes},
      {"ibm-granite-granite-4.0.jinja", ToolCallFormat::Hermes},
      {"Qwen3.5-4B.jinja", ToolCallFormat::Qwen3Coder},
      {"Qwen3-Coder.jinja", ToolCallFormat::Qwen3Coder},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", ToolCallFormat::Qwen3Coder},
      {"GLM-4.6.jinja", ToolCallFormat::Glm45},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::Llama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::Llama3Json},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::Llama3Json},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::Mistral},
      {"unsloth-mistral-Devstral-Small-2507.jinja", ToolCallFormat::Mistral},
      {"openai-gpt-oss-120b.jinja", ToolCallFormat::Harmony},
      // Formats kvserve does not read: no parser, rather than a wrong one.
      {"meetkai-functionary-medium-v3.1.jinja", ToolCallFormat::None},
      {"MiniMax-M3.jinja", ToolCallFormat::None},
      {"unsloth-Apriel-1.5.jinja", ToolCallFormat::None},
      {"deepseek-ai-DeepSeek-V3.1.jinja", ToolCallFormat::None},
      {"HuggingFaceTB-SmolLM3-3B.jinja", ToolCallFormat::None},
      {"google-gemma-4-31B-it.jinja", ToolCallFormat::Gemma4},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::None},
  };
  for (const auto& [file, format] : known) {
    const std::string source = read_template(file);
    EXPECT_EQ(detect_tool_call_format(source), format) << file;
  }
  // Llama 4's JSON template: its own headers, the ipython role and "parameters".
  EXPECT_EQ(detect_tool_call_format("<|header_start|>ipython<|header_end|> {\"name\": name, \"parameters\": {}}"),
            ToolCallFormat::Llama3Json);
  EXPECT_EQ(detect_tool_call_format(""), ToolCallFormat::None);
  EXPECT_EQ(detect_tool_call_format("chatml"), ToolCallFormat::None);
  // The pythonic templates (vLLM's examples, Llama 3.2 / 4 pythonic) spell the format out in their system prompt.
  EXPECT_EQ(detect_tool_call_format("{{- \"put it in the format of [func_name1(params_name1=params_value1, "
                                    "params_name2=params_value2...), func_name2(params)]\" }}"),
            ToolCallFormat::Pythonic);
}

}  // namespace
}  // namespace kvserve::server
