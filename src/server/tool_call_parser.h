#pragma once
// Tool calls out of a chat model's reply, in the formats the models were tuned on, as vLLM's tool parsers
// of the same names read them:
//   hermes       <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>   (Qwen2.5, Qwen3, QwQ, Hermes 2/3,
//                Granite 4, MiMo, Bielik)
//   qwen3_coder  <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
//                (Qwen3-Coder, Qwen3.5, Nemotron 3 Nano, Step 3.5)
//   glm45        <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>   (GLM 4.5-4.7,
//                Ling, Laguna)
//   llama3_json  a reply that is {"name": ..., "parameters": {...}} (after an optional <|python_tag|>, or
//                Llama 4's <|python_start|> before an optional <|python_end|>), several separated by ';'
//                (Llama 3.1-3.3, Llama 4's JSON templates; vLLM's llama3_json and llama4_json)
//   mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] or [TOOL_CALLS]NAME[ARGS]{...}, repeated
//                (Mistral Nemo, Small 3.x, Devstral, Ministral 3)
//   pythonic     a reply that is [NAME(KEY=VALUE, ...), ...], Python literals as values (after an optional
//                <|python_start|>, before an optional <|python_end|>)   (Llama 3.2 and Llama 4 with their pythonic
//                templates, ToolACE; vLLM's pythonic and llama4_pythonic)
//   openai       harmony messages: a header naming a recipient, <|channel|>commentary to=functions.NAME
//                <|constrain|>json<|message|>{...} (or "to=functions.NAME" before <|channel|>), ended by <|call|>
//                (gpt-oss; other recipients, its built-in tools, and other messages stay text)
//   gemma4       <|tool_call>call:NAME{KEY:VALUE,...}<tool_call|>, strings between <|"|> quotes (their text as it
//                is), bare keys, nested {...} and [...], JSON numbers, true, false, null (Gemma 4, as llama.cpp's
//                gemma4 chat parser reads it)
// Text outside the calls is the reply's content. A call that does not parse stays in the content as the
// model wrote it, so nothing the model said is lost; a reply without calls is its content unchanged. Where
// the reply has calls, stretches of outside text that are only whitespace (the newlines between calls) are
// dropped. Fed piece by piece for a stream, the parser holds back only what may still become a call, and
// what it gives out over a stream is exactly what parse_tool_calls gives for the whole text.
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_grammar.h"

namespace kvserve::server {

enum class ToolCallFormat { None, Hermes, Qwen3Coder, Glm45, Llama3Json, Mistral, Harmony, Pythonic, Gemma4 };

// vLLM's parser names ("hermes", "qwen3_coder", "glm45", "llama3_json" or "llama4_json", "mistral", "openai",
// "pythonic" or "llama4_pythonic", "gemma4", "none"); nullopt otherwise. A format's name is the first of these.
std::optional<ToolCallFormat> tool_call_format_named(std::string_view name);
std::string_view tool_call_format_name(ToolCallFormat format);
// The format a chat template writes its assistant's tool calls in (None when it writes none of these).
ToolCallFormat detect_tool_call_format(std::string_view chat_template);
// The texts of the format's markers: where a vocabulary makes one a control token (Mistral's [TOOL_CALLS],
// Llama 3's <|python_tag|>), the reply must still show it for the parser to see it.
std::vector<std::string> tool_call_markers(ToolCallFormat format);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text
  bool operator==(const ParsedToolCall&) const = default;
};

struct ToolCallPiece {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

class ToolCallParser {
 public:
  // `tools`: the request's tool list (an array, or null). The XML formats write every argument as text;
  // the types in a tool's parameter schema say which are numbers, booleans, objects or arrays.
  ToolCallParser(ToolCallFormat format, nlohmann::ordered_json tools);

  // What of everything fed so far is now decided.
  ToolCallPiece feed(std::string_view text);
  // The rest, at the end of the reply.
  ToolCallPiece finish();
  // Whether any call has been given out.
  bool called() const { return calls_ > 0; }

 private:
  enum class State { Text, Block, Section };
  void emit_text(std::string_view text, ToolCallPiece& out);
  std::string_view block_close() const;  // what ends the format's blocks
  void emit_calls(std::vector<ParsedToolCall> calls, ToolCallPiece& out);
  std::optional<std::vector<ParsedToolCall>> parse_block(std::string_view body) const;
  std::optional<std::vector<ParsedToolCall>> parse_section(std::string_view section) const;
  void feed_harmony(std::string_view rest, ToolCallPiece& out);
  void finish_harmony_message(std::string_view end_tag, ToolCallPiece& out);

  ToolCallFormat format_;
  nlohmann::ordered_json tools_;
  State state_ = State::Text;
  bool at_start_ = true;           // llama3_json, pythonic: nothing but whitespace seen yet
  bool segment_has_text_ = false;  // the outside text since the last call holds more than whitespace
  std::string held_;             // outside text that may be the start of a marker
  std::string blank_;            // the current segment's text while it is only whitespace
  std::string opener_;           // the marker that opened the current block or section
  std::string block_;            // the current block's or section's text
  size_t body_at_ = 0;           // harmony: where the call's body starts in block_
  int calls_ = 0;
};

// The grammar of one call, in `format`, of one of `tools` (tool_choice "required", or a function it names:
// then `tools` holds only that one): the reply is that call and nothing else. `chat_template` tells Mistral's
// two ways apart (NAME[ARGS]{...} where the template writes [ARGS], else the JSON list). In the XML formats
// (qwen3_coder, glm45) a string parameter is raw text (free, an enum, a known format or a length; a pattern is
// refused) and any other is JSON. gemma4 writes the arguments in its own notation (strings between <|"|> marks,
// keys bare); pythonic as [NAME(key=VALUE, ...)] of Python literals; openai (harmony) as gpt-oss writes a call,
// <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}. Throws Error for none, and for a
// tool's schema the grammar cannot enforce.
std::shared_ptr<const Grammar> forced_tool_call_grammar(ToolCallFormat format, const nlohmann::ordered_json& tools,
                                                        std::string_view chat_template);

// The whole reply at once.
ToolCallPiece parse_tool_calls(ToolCallFormat format, const nlohmann::ordered_json& tools, std::string_view text);

}  // namespace kvserve::server
