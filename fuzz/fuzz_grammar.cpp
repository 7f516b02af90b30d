// libFuzzer target: arbitrary bytes as a JSON schema (up to the first NUL byte) and a reply to feed it (the
// rest), through a small vocabulary (every byte a token, plus a few longer ones). The compiler takes the
// schema or refuses it with kvserve::Error; then at every byte the mask allows exactly the tokens the
// matcher accepts, and a reply the matcher calls whole is JSON a strict reader parses. Anything else, a
// crash or a hang, is a bug. Odd-sized inputs put a reasoning block (after_reasoning) before the JSON. Some
// even-sized ones take the schema as a tool's parameters and force a call in an XML tool-call format, in
// Gemma 4's notation or as a pythonic call: a whole reply must then read back as exactly that one call.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "engine/grammar_matcher.h"
#include "engine/json_grammar.h"
#include "fuzz_vocab.h"
#include "model/tokenizer.h"
#include "server/tool_call_parser.h"

using namespace kvserve;

namespace {

const std::vector<std::string> kLonger = {"{\"", "\":", "\",", "\"}",   "true", "null",   "  ",
                                          "\n",  "12",  "é",   "\\u00", "]}",   "<|\"|>", "<tool_call|>"};

const GrammarTokenTable& table() {
  static const std::unique_ptr<Tokenizer> tok = byte_vocab(kLonger);
  static const GrammarTokenTable t(*tok);
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  if (nul == std::string_view::npos) return 0;
  const auto schema = nlohmann::ordered_json::parse(input.substr(0, nul), nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  // A quarter of the inputs: a forced call with these parameters, in qwen3_coder, glm45, gemma4 or pythonic.
  const bool xml = size % 4 == 0;
  const auto format = size % 3 == 0   ? kvserve::server::ToolCallFormat::Qwen3Coder
                      : size % 3 == 1 ? kvserve::server::ToolCallFormat::Glm45
                      : size % 8 == 0 ? kvserve::server::ToolCallFormat::Gemma4
                                      : kvserve::server::ToolCallFormat::Pythonic;
  nlohmann::ordered_json tools;
  std::shared_ptr<const Grammar> grammar;
  try {
    if (xml) {
      tools = nlohmann::ordered_json::array(
          {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", schema}}}}});
      grammar = kvserve::server::forced_tool_call_grammar(format, tools, "");
    } else {
      grammar = json_schema_grammar(schema);
    }
  } catch (const Error&) {
    return 0;
  }
  // Half the inputs go through a reasoning block first (opened by the prompt or not).
  const bool reasoning = size % 2 == 1, opened = size % 4 == 3;
  if (reasoning) grammar = after_reasoning(grammar, opened);
  const GrammarTokenTable& t = table();
  GrammarMatcher m(grammar, t);
  const std::string text = walk_checking_masks(m, t, input.substr(nul + 1));
  // The JSON after the reasoning block, which ends at its first "</think>": one the prompt opened, or one
  // the reply opens with "<think>".
  const bool block = reasoning && (opened || text.rfind("<think>", 0) == 0);
  const size_t think = block ? text.find("</think>") : std::string::npos;
  const std::string value = think == std::string::npos ? text : text.substr(think + 8);
  if (xml) {
    if (m.can_end() && !text.empty()) {
      const auto parsed = kvserve::server::parse_tool_calls(format, tools, text);
      if (parsed.calls.size() != 1 || !parsed.content.empty()) __builtin_trap();
    }
    return 0;
  }
  if (m.can_end() && !text.empty() && nlohmann::json::parse(value, nullptr, false).is_discarded()) __builtin_trap();
  return 0;
}
