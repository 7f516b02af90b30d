#include "server/tool_call_parser.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/error.h"
#include "server/pythonic_calls.h"

namespace kvserve::server {

using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kBlockOpen = "<tool_call>";
constexpr std::string_view kBlockClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kPythonStart = "<|python_start|>";
constexpr std::string_view kPythonEnd = "<|python_end|>";

constexpr std::string_view kGemma4Open = "<|tool_call>";
constexpr std::string_view kGemma4Close = "<tool_call|>";
constexpr std::string_view kGemma4Quote = "<|\"|>";

constexpr std::string_view kHarmonyStart = "<|start|>";
constexpr std::string_view kHarmonyChannel = "<|channel|>";
constexpr std::string_view kHarmonyMessage = "<|message|>";
constexpr std::string_view kHarmonyRecipient = "to=functions.";
constexpr std::string_view kHarmonyEnds[] = {"<|end|>", "<|call|>", "<|return|>"};

constexpr std::array<std::pair<std::string_view, ToolCallFormat>, 11> kNames = {{
    {"none", ToolCallFormat::None},
    {"hermes", ToolCallFormat::Hermes},
    {"qwen3_coder", ToolCallFormat::Qwen3Coder},
    {"glm45", ToolCallFormat::Glm45},
    {"llama3_json", ToolCallFormat::Llama3Json},
    {"llama4_json", ToolCallFormat::Llama3Json},
    {"mistral", ToolCallFormat::Mistral},
    {"openai", ToolCallFormat::Harmony},
    {"pythonic", ToolCallFormat::Pythonic},
    {"llama4_pythonic", ToolCallFormat::Pythonic},
    {"gemma4", ToolCallFormat::Gemma4},
}};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

void skip_space(std::string_view& s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
}

bool consume(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// Names as OpenAI allows them (letters, digits, '_', '-'), and '.' and ':' some models' tools use. The
// formats that write a bare name (glm45, mistral's NAME[ARGS]) need it to tell a call from other text.
bool is_function_name(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == ':';
  });
}

// The length of the longest end of `text` that is a proper start of `tag`.
size_t partial_tag_at_end(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

// The length of the JSON object or array `s` starts with (strings and escapes respected), or npos when it
// does not close. Lets the parser find where one value ends and the next begins, as Python's raw_decode.
size_t json_value_length(std::string_view s) {
  if (s.empty() || (s[0] != '{' && s[0] != '[')) return std::string_view::npos;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// A reply's bytes need not be UTF-8: such a string becomes U+FFFD rather than an exception.
std::string dump_arguments(const json& arguments) {
  return arguments.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<json> parse_json(std::string_view text) {
  json value = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return std::nullopt;
  return value;
}

// {"name": ..., "arguments" | "parameters": {...}} -> a call; the arguments may also come as the text of
// a JSON object (some fine-tunes write them so).
std::optional<ParsedToolCall> call_from_json(const json& call) {
  if (!call.is_object()) return std::nullopt;
  auto name = call.find("name");
  if (name == call.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  auto args = call.find("arguments");
  if (args == call.end()) args = call.find("parameters");
  json arguments = json::object();
  if (args != call.end() && !args->is_null()) {
    if (args->is_object()) {
      arguments = *args;
    } else if (args->is_string()) {
      std::optional<json> parsed = parse_json(args->get_ref<const std::string&>());
      if (!parsed || !parsed->is_object()) return std::nullopt;
      arguments = std::move(*parsed);
    } else {
      return std::nullopt;
    }
  }
  return ParsedToolCall{name->get<std::string>(), dump_arguments(arguments)};
}

// The JSON type a tool's parameter schema gives `key` of function `name` ("" where the tools do not say).
std::string parameter_type(const json& tools, std::string_view name, std::string_view key) {
  if (!tools.is_array()) return {};
  for (const json& tool : tools) {
    if (!tool.is_object() || !tool.contains("function")) continue;
    const json& fn = tool["function"];
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>() != name)
      continue;
    const json* props = nullptr;
    if (fn.contains("parameters") && fn["parameters"].is_object() && fn["parameters"].contains("properties"))
      props = &fn["parameters"]["properties"];
    if (props == nullptr || !props->is_object()) return {};
    auto prop = props->find(std::string(key));
    if (prop == props->end() || !prop->is_object() || !prop->contains("type")) return {};
    const json& type = (*prop)["type"];
    if (type.is_string()) return type.get<std::string>();
    // ["integer", "null"]: the first type that is not null.
    if (type.is_array())
      for (const json& t : type)
        if (t.is_string() && t.get<std::string>() != "null") return t.get<std::string>();
    return {};
  }
  return {};
}

// The XML formats write each argument as text: a string parameter keeps it, a typed one is read as JSON
// (42, true, {"a": 1}) where it parses, as vLLM converts them.
json typed_argument(const json& tools, std::string_view name, std::string_view key, std::string_view text) {
  const std::string type = parameter_type(tools, name, key);
  if (type.empty() || type == "string") return json(std::string(text));
  if (std::optional<json> value = parse_json(trim(text))) return std::move(*value);
  if (type == "boolean") {
    if (trim(text) == "True") return json(true);
    if (trim(text) == "False") return json(false);
  }
  return json(std::string(text));
}

// The text before the first of `ends` in `s` (all of s when none occurs).
std::string_view until_first(std::string_view s, std::initializer_list<std::string_view> ends) {
  size_t at = s.size();
  for (std::string_view end : ends) at = std::min(at, s.find(end));
  return s.substr(0, at);
}

// <function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>...</function>
std::optional<ParsedToolCall> parse_qwen3_coder(std::string_view s, const json& tools) {
  if (!consume(s, "<function=")) return std::nullopt;
  const size_t close = s.find('>');
  if (close == std::string_view::npos) return std::nullopt;
  const std::string name(trim(s.substr(0, close)));
  if (name.empty()) return std::nullopt;
  s.remove_prefix(close + 1);
  json arguments = json::object();
  for (;;) {
    skip_space(s);
    if (s.empty() || consume(s, "</function>")) break;
    if (!consume(s, "<parameter=")) return std::nullopt;
    const size_t key_end = s.find('>');
    if (key_end == std::string_view::npos) return std::nullopt;
    const std::string key(trim(s.substr(0, key_end)));
    s.remove_prefix(key_end + 1);
    // A value ends at its </parameter>, or where the model went on without one.
    std::string_view value = until_first(s, {"</parameter>", "<parameter=", "</function>"});
    s.remove_prefix(value.size());
    consume(s, "</parameter>");
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    arguments[key] = typed_argument(tools, name, key, value);
  }
  if (!trim(s).empty()) return std::nullopt;
  return ParsedToolCall{name, dump_arguments(arguments)};
}

// NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>...
std::optional<ParsedToolCall> parse_glm45(std::string_view s, const json& tools) {
  const std::string_view head = until_first(s, {"<arg_key>"});
  const std::string name(trim(head));
  if (!is_function_name(name)) return std::nullopt;
  s.remove_prefix(head.size());
  json arguments = json::object();
  for (;;) {
    skip_space(s);
    if (s.empty()) break;
    if (!consume(s, "<arg_key>")) return std::nullopt;
    const size_t key_end = s.find("</arg_key>");
    if (key_end == std::string_view::npos) return std::nullopt;
    const std::string key(trim(s.substr(0, key_end)));
    s.remove_prefix(key_end + std::string_view("</arg_key>").size());
    skip_space(s);
    if (!consume(s, "<arg_value>")) return std::nullopt;
    const size_t value_end = s.find("</arg_value>");
    if (value_end == std::string_view::npos) return std::nullopt;
    arguments[key] = typed_argument(tools, name, key, s.substr(0, value_end));
    s.remove_prefix(value_end + std::string_view("</arg_value>").size());
  }
  return ParsedToolCall{name, dump_arguments(arguments)};
}

// One Gemma 4 value at the start of `s`, consumed, as JSON: <|"|>TEXT<|"|> (the text as it is), {KEY:VALUE, ...}
// (a key is the text up to its ':', or quoted as a string), [VALUE, ...], a JSON number, true, false or null. Nesting
// deeper than 64 is refused (a reply is untrusted input).
std::optional<json> take_gemma4_value(std::string_view& s, int depth = 0) {
  if (depth > 64) return std::nullopt;
  skip_space(s);
  if (consume(s, kGemma4Quote)) {
    const size_t end = s.find(kGemma4Quote);
    if (end == std::string_view::npos) return std::nullopt;
    json text(std::string(s.substr(0, end)));
    s.remove_prefix(end + kGemma4Quote.size());
    return text;
  }
  const bool object = s.starts_with('{');
  if (object || s.starts_with('[')) {
    const char close = object ? '}' : ']';
    s.remove_prefix(1);
    json value = object ? json::object() : json::array();
    skip_space(s);
    if (consume(s, std::string_view(&close, 1))) return value;
    for (;;) {
      skip_space(s);
      if (object) {
        // A key as the template writes a call's (bare), or quoted as it writes a tool's declaration.
        std::string key;
        if (consume(s, kGemma4Quote)) {
          const size_t end = s.find(kGemma4Quote);
          if (end == std::string_view::npos) return std::nullopt;
          key = s.substr(0, end);
          s.remove_prefix(end + kGemma4Quote.size());
          skip_space(s);
          if (!consume(s, ":")) return std::nullopt;
        } else {
          const size_t colon = s.find_first_of(":}");
          if (colon == 0 || colon == std::string_view::npos || s[colon] != ':') return std::nullopt;
          key = s.substr(0, colon);
          s.remove_prefix(colon + 1);
        }
        std::optional<json> v = take_gemma4_value(s, depth + 1);
        if (!v) return std::nullopt;
        value[key] = std::move(*v);
      } else {
        std::optional<json> v = take_gemma4_value(s, depth + 1);
        if (!v) return std::nullopt;
        value.push_back(std::move(*v));
      }
      skip_space(s);
      if (consume(s, std::string_view(&close, 1))) return value;
      if (!consume(s, ",")) return std::nullopt;
    }
  }
  for (std::string_view word : {"true", "false", "null"})
    if (consume(s, word)) return json::parse(word);
  size_t n = 0;
  while (n < s.size() && (std::isdigit(static_cast<unsigned char>(s[n])) != 0 || s[n] == '-' || s[n] == '+' ||
                          s[n] == '.' || s[n] == 'e' || s[n] == 'E'))
    ++n;
  std::optional<json> number = n > 0 ? parse_json(s.substr(0, n)) : std::nullopt;
  if (!number || !number->is_number()) return std::nullopt;
  s.remove_prefix(n);
  return number;
}

// call:NAME{...}: a Gemma 4 call's block.
std::optional<ParsedToolCall> parse_gemma4_call(std::string_view s) {
  s = trim(s);
  if (!consume(s, "call:")) return std::nullopt;
  const size_t brace = s.find('{');
  if (brace == std::string_view::npos) return std::nullopt;
  const std::string name(s.substr(0, brace));
  if (!is_function_name(name)) return std::nullopt;
  s.remove_prefix(brace);
  std::optional<json> arguments = take_gemma4_value(s);
  if (!arguments || !arguments->is_object() || !trim(s).empty()) return std::nullopt;
  return ParsedToolCall{name, dump_arguments(*arguments)};
}

// One JSON object or array at the start of `s`, consumed.
std::optional<json> take_json(std::string_view& s) {
  const size_t n = json_value_length(s);
  if (n == std::string_view::npos) return std::nullopt;
  std::optional<json> value = parse_json(s.substr(0, n));
  s.remove_prefix(n);
  return value;
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format_named(std::string_view name) {
  for (const auto& [n, format] : kNames)
    if (n == name) return format;
  return std::nullopt;
}

std::string_view tool_call_format_name(ToolCallFormat format) {
  for (const auto& [n, f] : kNames)
    if (f == format) return n;
  return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view t) {
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has(kGemma4Open) && has(kGemma4Close)) return ToolCallFormat::Gemma4;
  if (has(kMistralOpen)) return ToolCallFormat::Mistral;
  // gpt-oss writes "<|start|>assistant to=" + "functions." + name.
  if (has(kHarmonyChannel) && has(" to=") && has("functions.")) return ToolCallFormat::Harmony;
  if (has(kBlockOpen)) {
    // MiniMax's <invoke> and Apriel's <tool_calls>[...] mention <tool_call> but write other formats.
    if (has("<invoke") || has("<tool_calls>")) return ToolCallFormat::None;
    if (has("<function=")) return ToolCallFormat::Qwen3Coder;
    if (has("<arg_key>")) return ToolCallFormat::Glm45;
    return ToolCallFormat::Hermes;
  }
  // Functionary's <function=NAME>{...}</function> is its own format.
  if (has("<function=")) return ToolCallFormat::None;
  // The pythonic templates spell the format out: "[func_name1(params_name1=params_value1, ...), ...]".
  if (has("[func_name1(")) return ToolCallFormat::Pythonic;
  // Llama 3.1-3.3, and Llama 4 (its headers <|header_start|>).
  if ((has("<|start_header_id|>") || has("<|header_start|>")) && has("\"parameters\"") &&
      (has(kPythonTag) || has("ipython")))
    return ToolCallFormat::Llama3Json;
  return ToolCallFormat::None;
}

std::vector<std::string> tool_call_markers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Hermes:
    case ToolCallFormat::Qwen3Coder:
    case ToolCallFormat::Glm45:
      return {std::string(kBlockOpen), std::string(kBlockClose)};
    case ToolCallFormat::Llama3Json:
      return {std::string(kPythonTag), std::string(kPythonStart), std::string(kPythonEnd)};
    case ToolCallFormat::Pythonic:
      return {std::string(kPythonStart), std::string(kPythonEnd)};
    case ToolCallFormat::Gemma4:
      return {std::string(kGemma4Open), std::string(kGemma4Close), std::string(kGemma4Quote)};
    case ToolCallFormat::Mistral:
      return {std::string(kMistralOpen), std::string(kMistralArgs), std::string(kMistralCallId)};
    case ToolCallFormat::Harmony:  // its tokens are printed (mark_end_of_turn_tokens); <|call|> ends the reply
    case ToolCallFormat::None:
      break;
  }
  return {};
}

ToolCallParser::ToolCallParser(ToolCallFormat format, json tools) : format_(format), tools_(std::move(tools)) {}

std::string_view ToolCallParser::block_close() const {
  return format_ == ToolCallFormat::Gemma4 ? kGemma4Close : kBlockClose;
}

void ToolCallParser::emit_text(std::string_view text, ToolCallPiece& out) {
  if (text.empty()) return;
  if (segment_has_text_) {
    out.content += text;
    return;
  }
  if (std::all_of(text.begin(), text.end(), is_space)) {
    blank_ += text;
    return;
  }
  out.content += blank_;
  out.content += text;
  blank_.clear();
  segment_has_text_ = true;
}

void ToolCallParser::emit_calls(std::vector<ParsedToolCall> calls, ToolCallPiece& out) {
  blank_.clear();
  segment_has_text_ = false;
  calls_ += static_cast<int>(calls.size());
  for (ParsedToolCall& c : calls) out.calls.push_back(std::move(c));
}

std::optional<std::vector<ParsedToolCall>> ToolCallParser::parse_block(std::string_view body) const {
  // The three <tool_call> formats differ only inside the block, so each block is read by what it holds.
  const std::string_view s = trim(body);
  std::optional<ParsedToolCall> call;
  if (format_ == ToolCallFormat::Gemma4) {
    call = parse_gemma4_call(s);
  } else if (s.starts_with('{')) {
    if (std::optional<json> value = parse_json(s)) call = call_from_json(*value);
  } else if (s.starts_with("<function=")) {
    call = parse_qwen3_coder(s, tools_);
  } else {
    call = parse_glm45(s, tools_);
  }
  if (!call) return std::nullopt;
  return std::vector<ParsedToolCall>{std::move(*call)};
}

std::optional<std::vector<ParsedToolCall>> ToolCallParser::parse_section(std::string_view s) const {
  std::vector<ParsedToolCall> calls;
  if (format_ == ToolCallFormat::Pythonic) {
    // [NAME(KEY=VALUE, ...), ...], and the <|python_end|> Llama 4 may close it with.
    s = trim(s);
    if (s.ends_with(kPythonEnd)) s.remove_suffix(kPythonEnd.size());
    std::optional<std::vector<PythonicCall>> parsed = parse_pythonic_calls(s);
    if (!parsed) return std::nullopt;
    for (PythonicCall& c : *parsed) calls.push_back({std::move(c.name), dump_arguments(c.arguments)});
    return calls;
  }
  if (format_ == ToolCallFormat::Llama3Json) {
    // {...}; {...}, and the <|python_end|> Llama 4 may close them with.
    s = trim(s);
    if (s.ends_with(kPythonEnd)) s.remove_suffix(kPythonEnd.size());
    for (;;) {
      skip_space(s);
      std::optional<json> value = take_json(s);
      if (!value) return std::nullopt;
      std::optional<ParsedToolCall> call = call_from_json(*value);
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
      skip_space(s);
      if (s.empty()) return calls;
      if (!consume(s, ";")) return std::nullopt;
    }
  }
  // Mistral: [{...}, ...], or NAME[ARGS]{...} (NAME[CALL_ID]ID[ARGS]{...}); another [TOOL_CALLS] may follow.
  for (;;) {
    skip_space(s);
    if (s.starts_with('[')) {
      std::optional<json> value = take_json(s);
      if (!value || !value->is_array() || value->empty()) return std::nullopt;
      for (const json& v : *value) {
        std::optional<ParsedToolCall> call = call_from_json(v);
        if (!call) return std::nullopt;
        calls.push_back(std::move(*call));
      }
    } else {
      const std::string_view head = until_first(s, {kMistralArgs, kMistralCallId});
      const std::string name(trim(head));
      if (head.size() == s.size() || !is_function_name(name)) return std::nullopt;
      s.remove_prefix(head.size());
      if (consume(s, kMistralCallId)) s.remove_prefix(until_first(s, {kMistralArgs}).size());
      if (!consume(s, kMistralArgs)) return std::nullopt;
      skip_space(s);
      std::optional<json> args = take_json(s);
      if (!args || !args->is_object()) return std::nullopt;
      calls.push_back({name, dump_arguments(*args)});
    }
    skip_space(s);
    if (s.empty()) return calls;
    if (!consume(s, kMistralOpen)) return std::nullopt;
  }
}

// Harmony: text until a message header ("<|start|>" or "<|channel|>"), then the header up to "<|message|>". A
// header naming a function (to=functions.NAME) makes its message a call whose body, up to the message's end (or
// the reply's), is the arguments; any other message is text, header and all.
void ToolCallParser::feed_harmony(std::string_view rest, ToolCallPiece& out) {
  std::string carry;  // text after a header or a call, read on in the next round (a loop, not recursion: a reply
                      // may hold thousands of messages)
  while (!rest.empty()) {
    if (state_ == State::Text) {
      size_t at = std::string_view::npos, keep = 0;
      for (std::string_view opener : {kHarmonyStart, kHarmonyChannel}) {
        at = std::min(at, rest.find(opener));
        keep = std::max(keep, partial_tag_at_end(rest, opener));
      }
      if (at == std::string_view::npos) {
        emit_text(rest.substr(0, rest.size() - keep), out);
        held_ = rest.substr(rest.size() - keep);
        return;
      }
      emit_text(rest.substr(0, at), out);
      rest.remove_prefix(at);
      block_.clear();
      opener_.clear();  // the call's name once its header is read
      state_ = State::Block;
      continue;
    }
    if (opener_.empty()) {  // reading the header
      const size_t from = block_.size() >= kHarmonyMessage.size() ? block_.size() - (kHarmonyMessage.size() - 1) : 0;
      block_ += rest;
      rest = {};
      const size_t msg = block_.find(kHarmonyMessage, from);
      if (msg == std::string::npos) return;
      const std::string header = block_.substr(0, msg + kHarmonyMessage.size());
      std::string body = block_.substr(msg + kHarmonyMessage.size());
      const size_t to = header.find(kHarmonyRecipient);
      std::string name;
      if (to != std::string::npos) {
        const size_t start = to + kHarmonyRecipient.size();
        name = header.substr(start, header.find_first_of(" <", start) - start);
      }
      if (is_function_name(name)) {
        opener_ = std::move(name);
        block_ = header;
        body_at_ = block_.size();
      } else {
        // Not a call: the header is text, and so is what follows it.
        emit_text(header, out);
        block_.clear();
        state_ = State::Text;
      }
      carry = std::move(body);
      rest = carry;
      continue;
    }
    // In a call's body: up to the message's first end.
    block_ += rest;
    rest = {};
    size_t at = std::string::npos;
    std::string_view end_tag;
    for (std::string_view end : kHarmonyEnds)
      if (const size_t e = block_.find(end, body_at_); e < at) {
        at = e;
        end_tag = end;
      }
    if (at == std::string::npos) return;
    carry = block_.substr(at + end_tag.size());
    block_.resize(at);
    finish_harmony_message(end_tag, out);
    rest = carry;
  }
}

// The call whose header (block_'s first body_at_ bytes) and body block_ holds: a call when the body is a JSON
// object, else the message as the model wrote it, as text.
void ToolCallParser::finish_harmony_message(std::string_view end_tag, ToolCallPiece& out) {
  const std::string header = block_.substr(0, body_at_), body = block_.substr(body_at_);
  const std::string_view args = trim(body);
  std::optional<json> value = parse_json(args);
  if (value && value->is_object()) {
    emit_calls({ParsedToolCall{opener_, dump_arguments(*value)}}, out);
  } else {
    emit_text(header + body + std::string(end_tag), out);
  }
  block_.clear();
  opener_.clear();
  state_ = State::Text;
}

ToolCallPiece ToolCallParser::feed(std::string_view text) {
  ToolCallPiece out;
  std::string buf = std::move(held_);
  held_.clear();
  buf += text;
  if (format_ == ToolCallFormat::Harmony) {
    feed_harmony(buf, out);
    return out;
  }
  std::string_view rest(buf);
  while (!rest.empty()) {
    if (state_ == State::Text) {
      const bool whole_reply = format_ == ToolCallFormat::Llama3Json || format_ == ToolCallFormat::Pythonic;
      if (format_ == ToolCallFormat::None || (whole_reply && !at_start_)) {
        emit_text(rest, out);
        break;
      }
      if (whole_reply) {
        // Calls only where the reply itself is one: its first text a JSON object (llama3_json) or a list
        // (pythonic), or the format's tag (<|python_tag|>, <|python_start|>).
        // Llama 4 opens a call with <|python_start|> (both formats) where Llama 3 wrote <|python_tag|> (JSON).
        const char open = format_ == ToolCallFormat::Pythonic ? '[' : '{';
        const bool json_calls = format_ == ToolCallFormat::Llama3Json;
        size_t lead = 0;
        while (lead < rest.size() && is_space(rest[lead])) ++lead;
        emit_text(rest.substr(0, lead), out);
        rest.remove_prefix(lead);
        if (rest.empty()) break;
        const std::string_view tag = rest.starts_with(kPythonStart)               ? kPythonStart
                                     : json_calls && rest.starts_with(kPythonTag) ? kPythonTag
                                                                                  : std::string_view();
        if (rest.starts_with(open) || !tag.empty()) {
          opener_ = tag;
          rest.remove_prefix(opener_.size());
          block_.clear();
          state_ = State::Section;
        } else if (kPythonStart.starts_with(rest) || (json_calls && kPythonTag.starts_with(rest))) {
          held_ = rest;
          break;
        }
        at_start_ = false;
        continue;
      }
      const std::string_view opener = format_ == ToolCallFormat::Mistral  ? kMistralOpen
                                      : format_ == ToolCallFormat::Gemma4 ? kGemma4Open
                                                                          : kBlockOpen;
      const size_t at = rest.find(opener);
      if (at == std::string_view::npos) {
        const size_t keep = partial_tag_at_end(rest, opener);
        emit_text(rest.substr(0, rest.size() - keep), out);
        held_ = rest.substr(rest.size() - keep);
        break;
      }
      emit_text(rest.substr(0, at), out);
      rest.remove_prefix(at + opener.size());
      opener_ = opener;
      block_.clear();
      state_ = format_ == ToolCallFormat::Mistral ? State::Section : State::Block;
      continue;
    }
    if (state_ == State::Section) {
      // Everything after the opener is calls: read at the end.
      block_ += rest;
      break;
    }
    // In a block: wait for its close (searching only the new text and a marker's length before it).
    const std::string_view block_close = this->block_close();
    const size_t from = block_.size() >= block_close.size() ? block_.size() - (block_close.size() - 1) : 0;
    block_ += rest;
    const size_t close = block_.find(block_close, from);
    if (close == std::string::npos) break;
    const std::string body = block_.substr(0, close);
    const std::string after = block_.substr(close + block_close.size());
    block_.clear();
    state_ = State::Text;
    if (std::optional<std::vector<ParsedToolCall>> calls = parse_block(body)) {
      emit_calls(std::move(*calls), out);
    } else {
      emit_text(opener_ + body + std::string(block_close), out);
    }
    // `rest` pointed into buf, which `after` no longer depends on.
    buf = after;
    rest = buf;
  }
  return out;
}

ToolCallPiece ToolCallParser::finish() {
  ToolCallPiece out;
  if (format_ == ToolCallFormat::Harmony && state_ == State::Block) {
    if (opener_.empty()) {
      emit_text(block_, out);  // a header the reply stopped in
    } else {
      finish_harmony_message("", out);  // <|call|> ends generation: the body runs to the end
    }
    block_.clear();
    state_ = State::Text;
  }
  if (state_ == State::Text) {
    const std::string held = std::move(held_);
    emit_text(held, out);
  } else {
    // An unclosed block (the model stopped before </tool_call>) or the section: calls if they parse.
    std::optional<std::vector<ParsedToolCall>> calls =
        state_ == State::Block ? parse_block(block_) : parse_section(block_);
    if (calls) {
      emit_calls(std::move(*calls), out);
    } else {
      emit_text(opener_ + block_, out);
    }
  }
  if (calls_ == 0) out.content += blank_;
  blank_.clear();
  held_.clear();
  block_.clear();
  state_ = State::Text;
  return out;
}

namespace {

// The XML formats, as their templates write a call (and parse_qwen3_coder / parse_glm45 read it):
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
//   <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>
std::shared_ptr<const Grammar> forced_xml_tool_call_grammar(ToolCallFormat format, const json& tools) {
  static const XmlArgumentStyle qwen3_coder = {"<parameter=",  ">\n", "\n",
                                               "</parameter>", "\n",  {"<parameter=", "</function>"}};
  static const XmlArgumentStyle glm45 = {"<arg_key>", "</arg_key>\n<arg_value>", "", "</arg_value>", "\n", {}};
  const bool qwen = format == ToolCallFormat::Qwen3Coder;
  std::vector<ToolCallShape> shapes;
  for (const json& tool : tools) {
    const json& fn = tool.at("function");
    const std::string name = fn.at("name").get<std::string>();
    ToolCallShape shape;
    shape.head = qwen ? "<function=" + name + ">\n" : name + "\n";
    shape.parameters = fn.contains("parameters") ? fn["parameters"] : json();
    shape.tail = qwen ? "</function>\n</tool_call>" : "</tool_call>";
    shape.xml = qwen ? &qwen3_coder : &glm45;
    shapes.push_back(std::move(shape));
  }
  return tool_call_grammar(std::string(kBlockOpen) + (qwen ? "\n" : ""), shapes, "");
}

// One call of one of `tools` with its arguments in `notation`: Gemma 4's <|tool_call>call:NAME{...}<tool_call|>,
// or the pythonic [NAME(...)] (whose names must be Python's).
std::shared_ptr<const Grammar> notation_call_grammar(const json& tools, ArgumentNotation notation) {
  const bool python = notation == ArgumentNotation::Python;
  std::vector<ToolCallShape> shapes;
  for (const json& tool : tools) {
    const json& fn = tool.at("function");
    const std::string name = fn.at("name").get<std::string>();
    const bool identifier = !name.empty() && std::isdigit(static_cast<unsigned char>(name[0])) == 0 &&
                            std::all_of(name.begin(), name.end(),
                                        [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    if (python && !identifier) fail("the tool name '{}' cannot be written in a pythonic tool call", name);
    ToolCallShape shape;
    shape.head = name + (python ? "(" : "{");
    shape.parameters = fn.contains("parameters") ? fn["parameters"] : json();
    shape.tail = python ? "" : std::string(kGemma4Close);
    shape.notation = notation;
    shapes.push_back(std::move(shape));
  }
  return tool_call_grammar(python ? "[" : std::string(kGemma4Open) + "call:", shapes, python ? "]" : "");
}

}  // namespace

std::shared_ptr<const Grammar> forced_tool_call_grammar(ToolCallFormat format, const json& tools,
                                                        std::string_view chat_template) {
  std::string prefix, suffix, name_key = "name", args_key, tail = "}";
  bool mistral_args = false;
  switch (format) {
    case ToolCallFormat::Hermes:
      prefix = std::string(kBlockOpen) + "\n";
      suffix = "\n" + std::string(kBlockClose);
      args_key = "arguments";
      break;
    case ToolCallFormat::Llama3Json:
      args_key = "parameters";
      break;
    case ToolCallFormat::Mistral:
      mistral_args = chat_template.find(kMistralArgs) != std::string_view::npos;
      prefix = std::string(kMistralOpen) + (mistral_args ? "" : "[");
      suffix = mistral_args ? "" : "]";
      args_key = "arguments";
      if (mistral_args) tail.clear();
      break;
    case ToolCallFormat::Qwen3Coder:
    case ToolCallFormat::Glm45:
      return forced_xml_tool_call_grammar(format, tools);
    case ToolCallFormat::Gemma4:
      return notation_call_grammar(tools, ArgumentNotation::Gemma4);
    case ToolCallFormat::Pythonic:
      return notation_call_grammar(tools, ArgumentNotation::Python);
    case ToolCallFormat::Harmony:
      // As gpt-oss writes a call: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...} (its
      // <|call|> ends generation).
      prefix = std::string(kHarmonyChannel) + "commentary " + std::string(kHarmonyRecipient);
      tail.clear();
      break;
    default:
      fail("tool_choice 'required' or a named function is not supported for the {} tool-call format",
           tool_call_format_name(format));
  }
  std::vector<ToolCallShape> shapes;
  for (const json& tool : tools) {
    const json& fn = tool.at("function");
    const std::string name = fn.at("name").get<std::string>();
    ToolCallShape shape;
    if (format == ToolCallFormat::Harmony) {
      shape.head = name + " <|constrain|>json" + std::string(kHarmonyMessage);
    } else if (mistral_args) {
      shape.head = name + std::string(kMistralArgs);
    } else {
      shape.head = "{" + json(name_key).dump() + ": " + json(name).dump() + ", " + json(args_key).dump() + ": ";
    }
    shape.parameters = fn.contains("parameters") ? fn["parameters"] : json();
    shape.tail = tail;
    shapes.push_back(std::move(shape));
  }
  return tool_call_grammar(prefix, shapes, suffix);
}

ToolCallPiece parse_tool_calls(ToolCallFormat format, const json& tools, std::string_view text) {
  ToolCallParser parser(format, tools);
  ToolCallPiece out = parser.feed(text);
  ToolCallPiece rest = parser.finish();
  out.content += rest.content;
  for (ParsedToolCall& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace kvserve::server
