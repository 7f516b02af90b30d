#pragma once
// What a constrained reply may be, for structured output: JSON (any object: OpenAI's json_object mode), JSON
// valid against a schema (json_schema mode), or fixed text around such JSON (a tool call in the model's format,
// for tool_choice naming a function). A graph of nodes the GrammarMatcher walks one byte at a time.
//
// Schemas: type (one, or a list), properties / required (properties are written in the schema's order; ones
// not required may be left out; none beyond them), additionalProperties (without properties: the values' schema,
// or false for {}), minProperties / maxProperties, items, prefixItems (or draft 7's items list with
// additionalItems), minItems / maxItems, uniqueItems over items from an enum / const / boolean, minLength / maxLength,
// pattern, minimum / maximum / exclusiveMinimum / exclusiveMaximum, enum / const, anyOf / oneOf whose branches start
// with different characters or not (two objects are followed side by side until their keys differ), allOf of one
// schema, $ref into
// #/$defs or
// #/definitions (recursion included), multipleOf (exactly, on the decimal the schema writes: 0.3 is a multiple
// of 0.1). Annotations (title, description, default, examples, format, ...) are accepted and not enforced.
// Keywords that constrain values in ways the matcher does not (not, if / then / else, ...) are refused with
// an Error naming them, rather than output that would not validate.
#include <bitset>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/text_pattern.h"

namespace kvserve {

__extension__ typedef __int128 Int128;
inline constexpr int kBoundedFractionDigits = 12;

// Whether [lo, hi] holds a multiple of step (step > 0; 0 takes any value): what a bounded number with
// multipleOf may still be.
inline bool holds_multiple(Int128 lo, Int128 hi, Int128 step) {
  if (lo > hi) return false;
  if (step == 0) return true;
  const Int128 below = hi >= 0 ? hi / step : -((-hi + step - 1) / step);  // floor(hi / step)
  return below * step >= lo;
}

struct GrammarNode {
  enum class Kind : uint8_t {
    Object,
    Array,
    String,
    Number,
    Integer,
    Literals,
    Union,
    Sequence,
    Branches,
    Until,
    Regex
  };
  Kind kind = Kind::Literals;

  // Object with properties: each key (its JSON text without the quotes) and its value's node, in order.
  struct Property {
    std::string key;
    int node = -1;
    bool required = false;
  };
  std::vector<Property> properties;
  // Object without properties: any keys, values of this node (-1: no keys at all).
  int values = -1;

  int items = -1;                                  // Array: the items' node (after `tuple`; -1: none)
  // Array with uniqueItems, over items from a Literals node (enum / const / boolean): for each of its texts,
  // the texts of an equal value (itself included: 1 and 1.0 are one value). Empty: items may repeat.
  std::vector<uint64_t> same_value;
  std::vector<int> tuple;                          // Array: the first items' own nodes (prefixItems)
  uint32_t min_items = 0, max_items = UINT32_MAX;  // Array: items; String: characters; Object: properties

  // String: its characters (JSON escapes decoded) match this pattern. Regex: raw text matching it whole.
  std::shared_ptr<const TextPattern> pattern;

  // Number / Integer within bounds: the value times 10^kBoundedFractionDigits (a Number's; an Integer's is
  // not scaled) lies in [low, high]. Such numbers have no exponent and at most that many fraction digits.
  bool bounded = false;
  Int128 low = 0, high = 0;
  // multipleOf, in the same units: the value is a multiple of it (0: any value). Only where bounded.
  Int128 step = 0;

  // Literals: the exact JSON texts allowed (true, null, "red", 3, ...). Branches: fixed texts none of which
  // starts another, each followed by its own Sequence (alternatives[k] after literals[k]). Until: any text up
  // to and with literals[0], then whitespace (a reasoning block and the blank lines after it).
  std::vector<std::string> literals;
  std::vector<int> alternatives;  // Union: branches, told apart by their first byte; Branches: as above

  // Sequence: fixed text (node -1) and values in turn. An optional part's value may be left out (a GBNF
  // grammar's parts that may be empty); a sequence of only optional parts still takes at least one.
  struct Part {
    std::string text;
    int node = -1;
    bool optional = false;
  };
  std::vector<Part> parts;
};

struct Grammar {
  std::vector<GrammarNode> nodes;
  int root = -1;  // always a Sequence node
  // For each Union node, the branch a value starting with each byte takes (-1: none; -2 - k: several, the
  // branches ambiguous[k], which the matcher follows side by side until the text tells them apart); empty
  // for the rest.
  std::vector<std::vector<int32_t>> dispatch;
  std::vector<std::vector<int32_t>> ambiguous;
  // Each node's first bytes, where some sequence has optional parts (whether a byte can start one); else
  // empty.
  std::vector<std::bitset<256>> firsts;
  // The reply may also be empty (a GBNF root that derives empty text; the nodes themselves never do).
  bool may_be_empty = false;
};

// A grammar from nodes built elsewhere (gbnf_grammar.cpp): `root` given a Sequence if it is not one, and
// each union's dispatch worked out. Throws Error where a node can begin with itself or a byte starts too many
// readings at once.
Grammar finish_grammar(std::vector<GrammarNode> nodes, int root);

// Text matching the regular expression `pattern` whole (vLLM's guided_regex; see text_pattern.h for what
// is supported). Throws Error naming what it cannot compile.
std::shared_ptr<const Grammar> regex_grammar(const std::string& pattern);

// Exactly one of `choices`, as plain text (vLLM's guided_choice). Throws Error for none, or more than
// kMaxGrammarLiterals.
std::shared_ptr<const Grammar> text_choice_grammar(const std::vector<std::string>& choices);

// `grammar` after a reasoning model's <think> block, free text as the model likes: where the prompt already
// opened the block (`opened`), the text up to </think> and then the grammar's; otherwise either a whole
// <think>...</think> block first or none (a grammar whose own text starts with '<', a hermes tool call, is
// told apart from the block by the bytes after it).
// `after_close`: fixed text between the block's end and the grammar's (gpt-oss's "<|start|>assistant" after its
// analysis message's <|end|>).
std::shared_ptr<const Grammar> after_reasoning(const std::shared_ptr<const Grammar>& grammar, bool opened,
                                               const std::string& open_tag = "<think>",
                                               const std::string& close_tag = "</think>",
                                               const std::string& after_close = "");
// `text`, then `grammar`'s text (a harmony message's header before its constrained body).
std::shared_ptr<const Grammar> after_text(const std::string& text, const std::shared_ptr<const Grammar>& grammar);

// Limits that keep a constrained step cheap (GrammarMatcher's masks use 64-bit sets).
inline constexpr size_t kMaxGrammarProperties = 64;
inline constexpr size_t kMaxGrammarLiterals = 64;

// Any JSON object (the root), with any JSON values.
std::shared_ptr<const Grammar> json_object_grammar();
// JSON valid against `schema`. Throws Error naming the keyword or construct it cannot enforce.
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema);
// How the XML tool-call formats write arguments one by one, as their parsers read them back:
//   qwen3_coder  <parameter=KEY>\nVALUE\n</parameter>\n     glm45
//   <arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n
// A string parameter's value is its raw text (with none of `forbidden` in it, where the parser would stop);
// any other is its JSON, then `json_gap`.
struct XmlArgumentStyle {
  std::string key_open, key_close;  // around the key
  std::string json_gap;             // between a JSON value and value_end
  std::string value_end;            // closes a value
  std::string after;                // after value_end
  std::vector<std::string> forbidden;
};

// One call of one of several tools as a model writes it: `prefix`, then one tool's `head` (which names it),
// its arguments as JSON valid for its `parameters` schema (null: any object), its `tail`, then `suffix`.
// Hermes: "<tool_call>\n" + "{\"name\": \"f\", \"arguments\": " + {...} + "}" + "\n</tool_call>".
// With `xml`, the arguments are written in that style instead: the properties in the schema's order, those
// not required may be left out. In a notation, after a head that ends with the arguments' opening bracket,
// through the closing one (the properties in the schema's order):
//   Gemma4  {key:<|"|>text<|"|>,n:3,flags:[true],o:{k:null}}  strings between <|"|> marks as they are, keys bare,
//           the rest as JSON, no spaces;
//   Python  (key="text", n=3, flags=[True], o={"k": None})  keyword arguments of Python literals.
// Throws Error as json_schema_grammar, and when one head starts another.
enum class ArgumentNotation { Json, Gemma4, Python };
struct ToolCallShape {
  std::string head;
  nlohmann::ordered_json parameters;
  std::string tail;
  const XmlArgumentStyle* xml = nullptr;
  ArgumentNotation notation = ArgumentNotation::Json;
};
std::shared_ptr<const Grammar> tool_call_grammar(const std::string& prefix, const std::vector<ToolCallShape>& calls,
                                                 const std::string& suffix);

}  // namespace kvserve
