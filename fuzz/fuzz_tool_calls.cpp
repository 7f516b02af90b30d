// libFuzzer target: arbitrary bytes as a model's chat reply, read for tool calls in every format, and split into
// reasoning and content (think tags, harmony channels), whole and cut into two pieces at a point the input picks. The
// parser must not throw or crash; the streamed parts must equal the whole; a reply it finds no call in must come back
// unchanged as content; every call's arguments must be a JSON object.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/reasoning_split.h"
#include "server/tool_call_parser.h"

using namespace kvserve::server;

namespace {

const nlohmann::ordered_json& tools() {
  static const auto t = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f",
    "parameters": {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}}}}])");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t cut = data[0] % size;
  const std::string_view reply(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (ToolCallFormat format :
       {ToolCallFormat::Hermes, ToolCallFormat::Qwen3Coder, ToolCallFormat::Glm45, ToolCallFormat::Llama3Json,
        ToolCallFormat::Mistral, ToolCallFormat::Harmony, ToolCallFormat::Pythonic, ToolCallFormat::Gemma4}) {
    const ToolCallPiece whole = parse_tool_calls(format, tools(), reply);
    if (whole.calls.empty() && whole.content != reply) __builtin_trap();
    for (const ParsedToolCall& call : whole.calls) {
      const auto args = nlohmann::json::parse(call.arguments, nullptr, false);
      if (call.name.empty() || args.is_discarded() || !args.is_object()) __builtin_trap();
    }
    ToolCallParser parser(format, tools());
    ToolCallPiece streamed = parser.feed(reply.substr(0, std::min(cut, reply.size())));
    for (ToolCallPiece piece : {parser.feed(reply.substr(std::min(cut, reply.size()))), parser.finish()}) {
      streamed.content += piece.content;
      streamed.calls.insert(streamed.calls.end(), piece.calls.begin(), piece.calls.end());
    }
    if (streamed.content != whole.content || streamed.calls != whole.calls) __builtin_trap();
  }
  // gpt-oss's channels, think tags, Gemma 4's thought channel (opened by the prompt or not): the streamed split equals
  // the whole one.
  for (ReasoningFormat format :
       {ReasoningFormat::Harmony, ReasoningFormat::ThinkTags, ReasoningFormat::Gemma4Channel}) {
    const bool opened = format == ReasoningFormat::Gemma4Channel && size % 2 == 0;
    const ReasoningSplit whole = split_reasoning(reply, opened, format);
    ReasoningSplitter splitter(opened, format);
    ReasoningSplit streamed = splitter.feed(reply.substr(0, std::min(cut, reply.size())));
    for (const ReasoningSplit& piece : {splitter.feed(reply.substr(std::min(cut, reply.size()))), splitter.finish()}) {
      streamed.reasoning += piece.reasoning;
      streamed.content += piece.content;
    }
    if (streamed.reasoning != whole.reasoning || streamed.content != whole.content) __builtin_trap();
  }
  return 0;
}
