#include "engine/json_grammar.h"

#include <algorithm>
#include <array>
#include <bitset>
#include <cctype>
#include <functional>
#include <map>
#include <set>

#include "core/error.h"

namespace kvserve {

using json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxNodes = 20000;
constexpr int kMaxSchemaDepth = 64;
constexpr std::string_view kGemma4Quote = "<|\"|>";
constexpr int64_t kMaxReadings = 64;

// Keywords that constrain values beyond what the matcher enforces: refused, so a reply never claims to follow
// a schema it does not.
constexpr std::array<const char*, 12> kUnsupported = {"not",
                                                      "if",
                                                      "then",
                                                      "else",
                                                      "patternProperties",
                                                      "propertyNames",
                                                      "dependentRequired",
                                                      "dependentSchemas",
                                                      "dependencies",
                                                      "contains",
                                                      "unevaluatedProperties",
                                                      "unevaluatedItems"};

// Keywords that say nothing about which values are valid: allOf of one schema may sit beside them.
constexpr std::array<const char*, 8> kAnnotations = {"title",    "description", "default",  "examples",
                                                     "$comment", "deprecated",  "readOnly", "writeOnly"};

constexpr int kMaxAllOfParts = 256;

constexpr std::array<const char*, 4> kBounds = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

// The string formats written to their definition (RFC 3339 dates and times, RFC 4122 UUIDs, dotted IPv4,
// RFC 1123 host names, e-mail addresses), as patterns matched whole. Each accepts a subset of what a strict
// format checker takes (every February has 28 days; host name labels of at most 20 characters, at most four
// of them), so what the matcher writes passes one.
constexpr const char* kLabel = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,18}[A-Za-z0-9])?";
std::string format_pattern(const std::string& format) {
  const std::string date =
      "\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-"
      "8]))";
  const std::string time = "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,9})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)";
  const std::string label = kLabel;
  const std::string octet = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
  if (format == "date") return date;
  if (format == "time") return time;
  if (format == "date-time") return date + "T" + time;
  if (format == "uuid") return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
  if (format == "ipv4") return octet + "(?:\\." + octet + "){3}";
  // The last label starts with a letter: checkers refuse an all-numeric top-level domain.
  if (format == "hostname") return "(?:" + label + "\\.){0,3}[A-Za-z](?:[A-Za-z0-9-]{0,18}[A-Za-z0-9])?";
  if (format == "email") return "[A-Za-z0-9_%+-]+(?:\\.[A-Za-z0-9_%+-]+)*@(?:" + label + "\\.){1,3}[A-Za-z]{2,10}";
  return "";
}

std::string json_text(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::strict); }

Int128 pow10(int n) {
  Int128 v = 1;
  for (int k = 0; k < n; ++k) v *= 10;
  return v;
}

// Far past any number the matcher writes (18 integer digits, kBoundedFractionDigits after the point).
const Int128 kBeyond = pow10(36);

// A number's shortest decimal text (what the schema's author wrote) as |v| = mantissa·10^exponent, the
// mantissa's digits without leading zeros (none for 0).
struct DecimalText {
  bool negative = false;
  std::string mantissa;
  long exponent = 0;
};
DecimalText decimal_text(const json& v) {
  const std::string t = json_text(v);
  DecimalText d;
  size_t i = 0;
  d.negative = t[0] == '-';
  if (d.negative) i = 1;
  bool fraction = false;
  for (; i < t.size() && t[i] != 'e' && t[i] != 'E'; ++i) {
    if (t[i] == '.') {
      fraction = true;
      continue;
    }
    d.mantissa.push_back(t[i]);
    if (fraction) --d.exponent;
  }
  if (i < t.size()) d.exponent += std::stol(t.substr(i + 1));
  d.mantissa.erase(0, std::min(d.mantissa.size(), d.mantissa.find_first_not_of('0')));
  return d;
}

// `v` times 10^digits, rounded up or down to an integer, exactly: from the number's shortest decimal text,
// which is what the schema's author wrote and what a validator's comparison of doubles agrees with.
Int128 scaled_bound(const json& v, int digits, bool up, const char* key) {
  if (!v.is_number()) fail("'{}' must be a number", key);
  const DecimalText d = decimal_text(v);
  if (d.mantissa.empty()) return 0;
  const bool negative = d.negative;
  const std::string& mantissa = d.mantissa;
  const long exponent = d.exponent + digits;
  // |v|·10^digits = mantissa·10^exponent: its integer part, and whether anything was cut off.
  std::string whole = mantissa;
  bool cut = false;
  if (exponent >= 0) {
    if (whole.size() + static_cast<size_t>(exponent) > 36) return negative ? -kBeyond : kBeyond;
    whole.append(static_cast<size_t>(exponent), '0');
  } else {
    const size_t drop = std::min(whole.size(), static_cast<size_t>(-exponent));
    cut = whole.find_first_not_of('0', whole.size() - drop) != std::string::npos;
    whole.resize(whole.size() - drop);
  }
  Int128 q = 0;
  for (char c : whole) q = q * 10 + (c - '0');
  if (negative) return cut && !up ? -q - 1 : -q;
  return cut && up ? q + 1 : q;
}

// multipleOf as a step in units of 10^-digits: a value v is a multiple of m exactly where v·10^digits (an
// integer: what the matcher holds) is a multiple of the step. m = a·10^e from its shortest decimal text; with
// f = e + digits, the step is a·10^f where f >= 0, else a / gcd(a, 10^-f) (v·10^digits·10^-f must be a
// multiple of a, and a / gcd is coprime to what is left of 10^-f). A step past every number written (10^36)
// leaves only 0.
Int128 multiple_step(const json& v, int digits) {
  if (!v.is_number() || v.is_boolean()) fail("'multipleOf' must be a number");
  DecimalText d = decimal_text(v);
  const std::string t = json_text(v);
  if (d.negative || d.mantissa.empty()) fail("'multipleOf' must be greater than 0, got {}", t);
  std::string& mantissa = d.mantissa;
  long exponent = d.exponent;
  while (mantissa.size() > 1 && mantissa.back() == '0') mantissa.pop_back(), ++exponent;
  if (mantissa.size() > 36) fail("'multipleOf' {} is not supported", t);
  Int128 a = 0;
  for (char c : mantissa) a = a * 10 + (c - '0');
  const long f = exponent + digits;
  if (f >= 0) return static_cast<long>(mantissa.size()) + f > 36 ? kBeyond : a * pow10(static_cast<int>(f));
  for (long k = 0; k < -f && a % 2 == 0; ++k) a /= 2;
  for (long k = 0; k < -f && a % 5 == 0; ++k) a /= 5;
  return a;
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(&root) {}
  // Schemas after the first resolve their $refs against themselves.
  void set_root(const json& root) {
    root_ = &root;
    refs_.clear();
    notation_refs_.clear();
  }

  // Continues an existing grammar (its nodes keep their ids).
  void adopt(const Grammar& g) { grammar_ = g; }
  void adopt(std::vector<GrammarNode> nodes) { grammar_.nodes = std::move(nodes); }

  Grammar take(int root) {
    // The matcher starts a value from a parent that has a place for it: a root that is not a Sequence gets
    // one here, once, instead of in every matcher.
    if (grammar_.nodes[static_cast<size_t>(root)].kind != GrammarNode::Kind::Sequence) {
      GrammarNode seq;
      seq.kind = GrammarNode::Kind::Sequence;
      seq.parts.push_back({"", root});
      root = add(std::move(seq));
    }
    grammar_.root = root;
    refuse_left_recursion();
    const size_t n_nodes = grammar_.nodes.size();
    // Each node's first bytes, once (no loop goes through first positions now, so they are exact).
    std::map<int, std::bitset<256>> firsts;
    auto first = [&](int id) { return first_bytes(id, 0, &firsts); };
    grammar_.dispatch.assign(n_nodes, {});
    grammar_.ambiguous.clear();
    std::map<std::vector<int32_t>, int32_t> lists;
    std::bitset<256> ambiguous_bytes;
    for (size_t id = 0; id < n_nodes; ++id) {
      const GrammarNode& n = grammar_.nodes[id];
      if (n.kind != GrammarNode::Kind::Union) continue;
      std::array<std::vector<int32_t>, 256> by_byte;
      for (int a : n.alternatives) {
        const std::bitset<256> f = first(a);
        for (size_t b = 0; b < 256; ++b)
          if (f.test(b) && std::find(by_byte[b].begin(), by_byte[b].end(), a) == by_byte[b].end())
            by_byte[b].push_back(a);
      }
      std::vector<int32_t>& d = grammar_.dispatch[id];
      d.assign(256, -1);
      for (size_t b = 0; b < 256; ++b) {
        if (by_byte[b].size() == 1) d[b] = by_byte[b][0];
        if (by_byte[b].size() < 2) continue;
        ambiguous_bytes.set(b);
        auto [it, added] = lists.emplace(by_byte[b], static_cast<int32_t>(grammar_.ambiguous.size()));
        if (added) grammar_.ambiguous.push_back(by_byte[b]);
        d[b] = -2 - it->second;
      }
    }
    // Kept only where a sequence has optional parts (GBNF grammars), for the matcher to pass over them.
    grammar_.firsts.clear();
    const bool optional_parts = std::any_of(grammar_.nodes.begin(), grammar_.nodes.end(), [](const GrammarNode& n) {
      return std::any_of(n.parts.begin(), n.parts.end(), [](const GrammarNode::Part& p) { return p.optional; });
    });
    if (optional_parts) {
      grammar_.firsts.assign(n_nodes, {});
      for (size_t id = 0; id < n_nodes; ++id) grammar_.firsts[id] = first(static_cast<int>(id));
    }
    // The readings one byte can start, through unions and the first parts of sequences: the matcher follows
    // each, so their number is bounded.
    for (size_t b = 0; b < 256; ++b) {
      if (!ambiguous_bytes.test(b)) continue;
      std::vector<int64_t> memo(n_nodes, -1);
      std::function<int64_t(int)> readings = [&](int id) -> int64_t {
        const auto i = static_cast<size_t>(id);
        if (memo[i] >= 0) return memo[i];
        const GrammarNode& n = grammar_.nodes[i];
        int64_t total = 1;
        if (n.kind == GrammarNode::Kind::Union) {
          total = 0;
          for (int a : n.alternatives)
            if (first(a).test(b)) total = std::min<int64_t>(total + readings(a), kMaxReadings + 1);
        } else if (n.kind == GrammarNode::Kind::Sequence) {
          // The parts a value can start in: the optional ones up to the first that is not.
          total = 0;
          for (const GrammarNode::Part& part : n.parts) {
            if (part.node < 0) {
              total += 1;
              break;
            }
            if (first(part.node).test(b)) total = std::min<int64_t>(total + readings(part.node), kMaxReadings + 1);
            if (!part.optional) break;
          }
          total = std::max<int64_t>(total, 1);
        }
        memo[i] = total;
        return total;
      };
      for (size_t id = 0; id < n_nodes; ++id)
        if (grammar_.nodes[id].kind == GrammarNode::Kind::Union && readings(static_cast<int>(id)) > kMaxReadings)
          fail(
              "alternatives (anyOf / oneOf / type lists, or a grammar's) that nest so that a value can start more "
              "than {} ways at once are not supported",
              kMaxReadings);
    }
    return std::move(grammar_);
  }

  // A value that can begin with itself (a schema whose anyOf refers back to it before any text) has no first
  // byte to start with: refused, rather than a grammar that accepts nothing.
  void refuse_left_recursion() const {
    const size_t n = grammar_.nodes.size();
    std::vector<uint8_t> color(n, 0);  // 0: unseen, 1: on the path, 2: done
    std::vector<std::pair<int, size_t>> stack;
    auto firsts_of = [&](int id, std::vector<int>& out) {
      const GrammarNode& g = grammar_.nodes[static_cast<size_t>(id)];
      out.clear();
      if (g.kind == GrammarNode::Kind::Union) out = g.alternatives;
      if (g.kind == GrammarNode::Kind::Sequence)
        for (const GrammarNode::Part& part : g.parts) {
          if (part.node < 0) break;
          out.push_back(part.node);
          if (!part.optional) break;
        }
    };
    std::vector<int> kids;
    for (size_t start = 0; start < n; ++start) {
      if (color[start]) continue;
      stack.emplace_back(static_cast<int>(start), 0);
      color[start] = 1;
      while (!stack.empty()) {
        auto& [id, next] = stack.back();
        firsts_of(id, kids);
        if (next >= kids.size()) {
          color[static_cast<size_t>(id)] = 2;
          stack.pop_back();
          continue;
        }
        const int kid = kids[next++];
        if (color[static_cast<size_t>(kid)] == 1) fail("the schema refers to itself before any value starts");
        if (color[static_cast<size_t>(kid)] == 0) {
          color[static_cast<size_t>(kid)] = 1;
          stack.emplace_back(kid, 0);
        }
      }
    }
  }

  int add(GrammarNode node) {
    if (grammar_.nodes.size() >= kMaxNodes) fail("the schema is too large (more than {} nodes)", kMaxNodes);
    grammar_.nodes.push_back(std::move(node));
    return static_cast<int>(grammar_.nodes.size()) - 1;
  }

  int literals(std::vector<std::string> texts) {
    GrammarNode n;
    n.kind = GrammarNode::Kind::Literals;
    n.literals = std::move(texts);
    return add(std::move(n));
  }

  // Any JSON value.
  int any() {
    if (any_ >= 0) return any_;
    GrammarNode u;
    u.kind = GrammarNode::Kind::Union;
    any_ = add(u);
    GrammarNode object;
    object.kind = GrammarNode::Kind::Object;
    object.values = any_;
    GrammarNode array;
    array.kind = GrammarNode::Kind::Array;
    array.items = any_;
    GrammarNode string;
    string.kind = GrammarNode::Kind::String;
    GrammarNode number;
    number.kind = GrammarNode::Kind::Number;
    const std::vector<int> alts = {add(object), add(array), add(string), add(number), literals({"true", "false", "null"})};
    grammar_.nodes[static_cast<size_t>(any_)].alternatives = alts;
    return any_;
  }

  // Arguments in an XML style (XmlArgumentStyle), then `tail`: for each property from the first on, a
  // Branches node whose heads are the keys that may come next (up to and with the first required one) and,
  // where none is still required, the tail.
  int xml_arguments(const json& params, const XmlArgumentStyle& st, const std::string& tail) {
    if (st.value_end.empty() || tail.empty()) fail("an XML argument style needs a closing text and a tail");
    json props = json::object();
    std::vector<std::string> required;
    if (!params.is_null()) {
      if (!params.is_object()) fail("a tool's parameters must be an object schema");
      static const std::set<std::string> known = {"type",    "properties",  "required", "additionalProperties",
                                                  "title",   "description", "$defs",    "definitions",
                                                  "$schema", "$comment",    "default",  "examples",
                                                  "strict"};
      for (auto it = params.begin(); it != params.end(); ++it)
        if (!known.count(it.key())) fail("the parameters keyword '{}' is not supported in XML tool calls", it.key());
      if (params.contains("type") && params["type"] != "object") fail("a tool's parameters must be of type object");
      if (params.contains("properties")) props = params["properties"];
      if (!props.is_object()) fail("'properties' must be an object");
      for (const json& r : params.value("required", json::array())) {
        if (!r.is_string()) fail("'required' must be an array of property names");
        required.push_back(r.get<std::string>());
      }
      for (const std::string& r : required)
        if (!props.contains(r)) fail("the required property '{}' is not among the schema's properties", r);
    }
    if (props.size() + 1 > kMaxGrammarLiterals)
      fail("an XML tool call may have at most {} parameters", kMaxGrammarLiterals - 1);
    // Each property's value parts (up to and with `after`).
    std::vector<std::string> keys;
    std::vector<std::vector<GrammarNode::Part>> values;
    std::vector<bool> needed;
    for (auto it = props.begin(); it != props.end(); ++it) {
      const std::string& key = it.key();
      if (key.empty() || key.find_first_of("<>\n") != std::string::npos)
        fail("the parameter name '{}' cannot be written in an XML tool call", key);
      keys.push_back(key);
      needed.push_back(std::find(required.begin(), required.end(), key) != required.end());
      values.push_back(xml_value(it.value(), st));
    }
    std::vector<int> from(keys.size() + 1, -1);  // from[i]: the arguments from property i on, and the tail
    for (size_t i = keys.size() + 1; i-- > 0;) {
      GrammarNode b;
      b.kind = GrammarNode::Kind::Branches;
      size_t j = i;
      for (; j < keys.size(); ++j) {
        GrammarNode seq;
        seq.kind = GrammarNode::Kind::Sequence;
        seq.parts = values[j];
        seq.parts.push_back({"", from[j + 1]});
        b.literals.push_back(st.key_open + keys[j] + st.key_close);
        b.alternatives.push_back(add(std::move(seq)));
        if (needed[j]) break;
      }
      if (j >= keys.size()) {
        GrammarNode end;
        end.kind = GrammarNode::Kind::Sequence;
        b.literals.push_back(tail);
        b.alternatives.push_back(add(std::move(end)));
      }
      from[i] = add(std::move(b));
    }
    return from[0];
  }

  // One parameter's value in an XML style, through `after`.
  std::vector<GrammarNode::Part> xml_value(const json& sub, const XmlArgumentStyle& st) {
    // The parser's reading: a parameter whose type (its first that is not null) is string, or that has none,
    // is the raw text; any other is JSON.
    std::string type;
    if (sub.is_object() && sub.contains("type")) {
      const json& t = sub["type"];
      if (t.is_string()) type = t.get<std::string>();
      if (t.is_array())
        for (const json& x : t)
          if (x.is_string() && x != "null") {
            type = x.get<std::string>();
            break;
          }
    }
    std::vector<GrammarNode::Part> parts;
    if (!type.empty() && type != "string") {
      parts.push_back({"", compile(sub)});
      parts.push_back({st.json_gap + st.value_end + st.after, -1});  // value_end is never empty
      return parts;
    }
    auto regex_node = [&](std::shared_ptr<const TextPattern> p) {
      GrammarNode n;
      n.kind = GrammarNode::Kind::Regex;
      n.pattern = std::move(p);
      return add(std::move(n));
    };
    // value_end as a pattern, after the gap a template writes there (the parser trims it).
    auto escaped = [](const std::string& text) {
      std::string out;
      for (char c : text) {
        if (c == '\n') {
          out += "\\n";
          continue;
        }
        if (!std::isalnum(static_cast<unsigned char>(c))) out.push_back('\\');
        out.push_back(c);
      }
      return out;
    };
    const std::string end_pattern =
        (st.json_gap.empty() ? "" : "(?:" + escaped(st.json_gap) + ")?") + escaped(st.value_end);
    if (sub.is_object())
      for (const char* key : {"pattern", "$ref", "anyOf", "oneOf", "allOf", "not"})
        if (sub.contains(key)) fail("a string parameter with '{}' is not supported in XML tool calls", key);
    if (sub.is_object() && (sub.contains("enum") || sub.contains("const"))) {
      // The raw texts of the strings it allows: those a parser reads back as they are.
      std::vector<std::string> texts;
      const json values = sub.contains("const") ? json::array({sub["const"]}) : sub["enum"];
      if (!values.is_array()) fail("'enum' must be an array");
      for (const json& v : values)
        if (v.is_string() && !v.get<std::string>().empty() &&
            v.get<std::string>().find_first_of("<\n") == std::string::npos)
          texts.push_back(v.get<std::string>());
      if (texts.empty()) fail("a string parameter's enum has no value an XML tool call can write");
      if (!st.json_gap.empty())
        for (size_t k = 0, n = texts.size(); k < n; ++k) texts.push_back(texts[k] + st.json_gap);
      if (texts.size() > kMaxGrammarLiterals) fail("'enum' may list at most {} values here", kMaxGrammarLiterals);
      parts.push_back({"", literals(texts)});
      parts.push_back({st.value_end + st.after, -1});
      return parts;
    }
    const uint32_t min_len = count_field(sub, "minLength", 0), max_len = count_field(sub, "maxLength", UINT32_MAX);
    if (min_len > max_len) fail("'minLength' is above 'maxLength'");
    const std::string format = sub.is_object() ? sub.value("format", std::string()) : std::string();
    const std::string known_format = format.empty() ? std::string() : format_pattern(format);
    if (!known_format.empty()) {
      if (sub.contains("minLength") || sub.contains("maxLength"))
        fail("a string parameter with both 'format' and a length is not supported in XML tool calls");
      parts.push_back({"", regex_node(TextPattern::compile("(?:" + known_format + ")" + end_pattern,
                                                           TextPattern::Mode::FullMatch))});
    } else if (sub.is_object() && (sub.contains("minLength") || sub.contains("maxLength"))) {
      // No '<' (no tag inside) and no newline (the parser trims one at each end): the length is the text's.
      if (min_len > 1000) fail("'minLength' above 1000 is not supported in XML tool calls");
      const uint32_t top = std::min<uint32_t>(max_len, 1000);
      parts.push_back({"", regex_node(TextPattern::compile(fmt::format("[^<\\n]{{{},{}}}", min_len, top) + end_pattern,
                                                           TextPattern::Mode::FullMatch))});
    } else {
      parts.push_back({"", regex_node(TextPattern::text_until(st.value_end, st.forbidden))});
    }
    if (!st.after.empty()) parts.push_back({st.after, -1});
    return parts;
  }

  // A call's arguments in a model's own notation rather than JSON (ToolCallShape::notation):
  //   Gemma 4  {key:<|"|>text<|"|>,n:3,on:true,l:[1,2],o:{k:null}}  strings between <|"|> marks as they are, keys
  //            bare, the rest as JSON, no spaces (its template's format_argument; the gemma4 parser's reading);
  //   Python   (key="text", n=3, on=True, l=[1, 2], o={"k": None})  keyword arguments of Python literals (the
  //            pythonic templates' calls; the pythonic parser's reading).
  // The members from after the opening '{' or '(' (the call's head ends with it) through its closing one.
  int call_members(const json& s, int depth, bool top = true) {
    if (depth > kMaxSchemaDepth) fail("the schema nests deeper than {}", kMaxSchemaDepth);
    if (s.is_null() || (s.is_boolean() && s.get<bool>())) return any_members(notation_any(), top);
    if (!s.is_object()) fail("a tool's parameters must be an object schema");
    check_notation_keywords(s);
    if (s.contains("type") && s["type"] != "object") fail("a tool's parameters must be of type object");
    for (const char* key : {"minProperties", "maxProperties", "anyOf", "oneOf", "allOf", "$ref"})
      if (s.contains(key)) fail("an object schema with '{}' is not supported in {} tool calls", key, notation_name());
    const std::string close = top && python() ? ")" : "}";
    if (!s.contains("properties")) {
      const json extra = s.value("additionalProperties", json(true));
      if (extra.is_boolean() && !extra.get<bool>()) return add_branches({close}, {add_sequence({})});
      return any_members(notation_value(extra, depth + 1), top);
    }
    const json& props = s["properties"];
    if (!props.is_object()) fail("'properties' must be an object");
    if (props.size() + 1 > kMaxGrammarLiterals)
      fail("a {} tool call's object may have at most {} properties", notation_name(), kMaxGrammarLiterals - 1);
    std::vector<std::string> required;
    for (const json& r : s.value("required", json::array())) {
      if (!r.is_string()) fail("'required' must be an array of property names");
      if (!props.contains(r.get<std::string>()))
        fail("the required property '{}' is not among the schema's properties", r.get<std::string>());
      required.push_back(r.get<std::string>());
    }
    std::vector<std::string> keys;
    std::vector<int> values;
    std::vector<bool> needed;
    for (auto it = props.begin(); it != props.end(); ++it) {
      keys.push_back(member_key(it.key(), top));
      values.push_back(notation_value(it.value(), depth + 1));
      needed.push_back(std::find(required.begin(), required.end(), it.key()) != required.end());
    }
    // The properties in the schema's order, those not required may be left out: from[w][i] is the members from
    // property i on, w: whether one was written already (then each goes after a separator).
    const std::string sep = separator();
    const size_t n = keys.size();
    std::vector<int> from[2] = {std::vector<int>(n + 1), std::vector<int>(n + 1)};
    for (size_t i = n + 1; i-- > 0;)
      for (int written = 1; written >= 0; --written) {
        std::vector<std::string> heads;
        std::vector<int> rests;
        size_t j = i;
        for (; j < n; ++j) {
          heads.push_back(written ? sep + keys[j] : keys[j]);
          rests.push_back(add_sequence({{"", values[j]}, {"", from[1][j + 1]}}));
          if (needed[j]) break;
        }
        if (j >= n) {
          heads.push_back(close);
          rests.push_back(add_sequence({}));
        }
        from[written][i] = add_branches(std::move(heads), std::move(rests));
      }
    return from[0][0];
  }

  void set_notation(ArgumentNotation n) { notation_ = n; }

 private:
  bool python() const { return notation_ == ArgumentNotation::Python; }
  const char* notation_name() const { return python() ? "pythonic" : "gemma4"; }
  std::string separator() const { return python() ? ", " : ","; }

  // Python's double-quoted literal of a text, as the pythonic parser reads it back.
  static std::string python_string(const std::string& text) {
    std::string out = "\"";
    for (char c : text) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      if (c == '\r') {
        out += "\\r";
        continue;
      }
      out += c;
    }
    return out + "\"";
  }

  // A member's key and what follows it: Gemma 4's bare (or between <|"|> marks where a bare one would read
  // otherwise) and ':'; Python's keyword and '=' at the call's top, its string and ": " in a dict.
  std::string member_key(const std::string& key, bool top) const {
    if (python()) {
      if (!top) return python_string(key) + ": ";
      const bool identifier = !key.empty() && (std::isalpha(static_cast<unsigned char>(key[0])) || key[0] == '_') &&
                              std::all_of(key.begin(), key.end(), [](char c) {
                                return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                              });
      if (!identifier) fail("the parameter name '{}' cannot be written in a pythonic tool call", key);
      return key + "=";
    }
    if (key.find(kGemma4Quote) != std::string::npos || key.find("<tool_call|>") != std::string::npos)
      fail("the parameter name '{}' cannot be written in a gemma4 tool call", key);
    const bool bare = !key.empty() && key.find_first_of(":}") == std::string::npos &&
                      std::isspace(static_cast<unsigned char>(key[0])) == 0;
    return (bare ? key : std::string(kGemma4Quote) + key + std::string(kGemma4Quote)) + ":";
  }

  // A value's text in the notation (an enum's or const's).
  std::string value_text(const json& v) const {
    if (v.is_string()) {
      const std::string& t = v.get<std::string>();
      if (python()) return python_string(t);
      if (t.find(kGemma4Quote) != std::string::npos || t.find("<tool_call|>") != std::string::npos)
        fail("the value {} cannot be written in a gemma4 tool call", json_text(v));
      return std::string(kGemma4Quote) + t + std::string(kGemma4Quote);
    }
    if (v.is_array() || v.is_object()) {
      std::string out = v.is_array() ? "[" : "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += separator();
        first = false;
        if (v.is_object()) out += member_key(it.key(), false);
        out += value_text(it.value());
      }
      return out + (v.is_array() ? "]" : "}");
    }
    if (python() && v.is_boolean()) return v.get<bool>() ? "True" : "False";
    if (python() && v.is_null()) return "None";
    return json_text(v);
  }

  void check_notation_keywords(const json& s) const {
    for (const char* keyword : kUnsupported)
      if (s.contains(keyword)) fail("the schema keyword '{}' is not supported", keyword);
    for (const char* keyword : {"pattern", "prefixItems", "maxItems", "uniqueItems"})
      if (s.contains(keyword))
        fail("the schema keyword '{}' is not supported in {} tool calls", keyword, notation_name());
  }

  int add_sequence(std::vector<GrammarNode::Part> parts) {
    GrammarNode n;
    n.kind = GrammarNode::Kind::Sequence;
    n.parts = std::move(parts);
    return add(std::move(n));
  }

  int add_union(std::vector<int> alternatives) {
    GrammarNode n;
    n.kind = GrammarNode::Kind::Union;
    n.alternatives = std::move(alternatives);
    return add(std::move(n));
  }

  int add_branches(std::vector<std::string> heads, std::vector<int> rests) {
    GrammarNode n;
    n.kind = GrammarNode::Kind::Branches;
    n.literals = std::move(heads);
    n.alternatives = std::move(rests);
    return add(std::move(n));
  }

  int add_regex(const std::string& pattern) {
    GrammarNode n;
    n.kind = GrammarNode::Kind::Regex;
    n.pattern = TextPattern::compile(pattern, TextPattern::Mode::FullMatch);
    return add(std::move(n));
  }

  // Members of any keys with values of node `value`, through the close: Gemma 4's identifiers, Python's
  // keywords at the call's top and strings in a dict.
  int any_members(int value, bool top) {
    const std::string key_pattern = !python() ? "[A-Za-z_$][A-Za-z0-9_$.\\-]*:"
                                    : top     ? "[A-Za-z_][A-Za-z0-9_]*="
                                              : "\"[^\"\\\\\\n]*\": ";
    const std::string close = top && python() ? ")" : "}";
    const int key_id = add_regex(key_pattern);
    // more: either a separator, a member and more again, or the close.
    const int more = add_branches({separator(), close}, {-1, add_sequence({})});
    grammar_.nodes[static_cast<size_t>(more)].alternatives[0] = add_sequence({{"", key_id}, {"", value}, {"", more}});
    return add_union({literals({close}), add_sequence({{"", key_id}, {"", value}, {"", more}})});
  }

  // Items of node `item` through the ']', at least `min_items` (0 or 1) of them.
  int notation_items(int item, uint32_t min_items) {
    const int more = add_branches({separator(), "]"}, {-1, add_sequence({})});
    const int items = add_sequence({{"", item}, {"", more}});
    grammar_.nodes[static_cast<size_t>(more)].alternatives[0] = items;
    return min_items > 0 ? items : add_union({literals({"]"}), items});
  }

  // Any value in the notation.
  int notation_any() {
    if (notation_any_ >= 0) return notation_any_;
    notation_any_ = add_union({});
    GrammarNode number;
    number.kind = GrammarNode::Kind::Number;
    const std::vector<int> alts = {
        notation_string(json::object()), add_sequence({{"{", -1}, {"", any_members(notation_any_, false)}}),
        add_sequence({{"[", -1}, {"", notation_items(notation_any_, 0)}}), add(number),
        python() ? literals({"True", "False", "None"}) : literals({"true", "false", "null"})};
    grammar_.nodes[static_cast<size_t>(notation_any_)].alternatives = alts;
    return notation_any_;
  }

  // A string: its opening mark, its text (free; with a length or a format, matching them), its closing mark.
  // Gemma 4's text is as it is, up to the next mark; Python's a double-quoted literal, escapes allowed in free
  // text only.
  int notation_string(const json& s) {
    const std::string mark = python() ? "\"" : std::string(kGemma4Quote);
    const std::string end_pattern = python() ? "\"" : "<\\|\"\\|>";
    const std::string format = s.value("format", std::string());
    const std::string known_format = format.empty() ? std::string() : format_pattern(format);
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (!known_format.empty() && lengths)
      fail("a string with both 'format' and a length is not supported in {} tool calls", notation_name());
    int text = -1;
    if (!known_format.empty()) {
      text = add_regex("(?:" + known_format + ")" + end_pattern);
    } else if (lengths) {
      // Without '<' (Gemma 4) or an escape (Python) in it, the text's length is the string's.
      const uint32_t low = count_field(s, "minLength", 0), high = count_field(s, "maxLength", UINT32_MAX);
      if (low > high) fail("'minLength' is above 'maxLength'");
      if (low > 1000) fail("'minLength' above 1000 is not supported in {} tool calls", notation_name());
      const std::string chars = python() ? "[^\"\\\\\\n\\r]" : "[^<]";
      text = add_regex(fmt::format("{}{{{},{}}}", chars, low, std::min<uint32_t>(high, 1000)) + end_pattern);
    } else if (python()) {
      text = add_regex("(?:[^\"\\\\\\n\\r]|\\\\[\\\\\"nrt])*\"");
    } else {
      // The call's closing marker ends the block for the parser wherever it stands.
      GrammarNode until;
      until.kind = GrammarNode::Kind::Regex;
      until.pattern = TextPattern::text_until(mark, {"<tool_call|>"});
      text = add(std::move(until));
    }
    return add_sequence({{mark, -1}, {"", text}});
  }

  int notation_value(const json& s, int depth) {
    if (depth > kMaxSchemaDepth) fail("the schema nests deeper than {}", kMaxSchemaDepth);
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("a schema of false allows no value");
      return notation_any();
    }
    if (!s.is_object()) fail("a schema must be an object, got {}", json_text(s));
    check_notation_keywords(s);
    if (auto ref = s.find("$ref"); ref != s.end()) {
      if (!ref->is_string()) fail("'$ref' must be a string");
      const std::string path = ref->get<std::string>();
      if (auto it = notation_refs_.find(path); it != notation_refs_.end()) return it->second;
      const json* target = lookup(path);
      if (target == nullptr) fail("'$ref' '{}' does not name a schema in #/$defs or #/definitions", path);
      for (auto it = s.begin(); it != s.end(); ++it)
        if (it.key() != "$ref" && std::find(kAnnotations.begin(), kAnnotations.end(), it.key()) == kAnnotations.end())
          fail("keywords beside '$ref' are not supported in {} tool calls", notation_name());
      // Filled in once the target is compiled: a recursive schema refers back to this node.
      const int id = add_sequence({});
      notation_refs_[path] = id;
      const int value = notation_value(*target, depth + 1);
      grammar_.nodes[static_cast<size_t>(id)].parts = {{"", value}};
      return id;
    }
    if (s.contains("allOf")) fail("'allOf' is not supported in {} tool calls", notation_name());
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& branches = s[key];
      if (!branches.is_array() || branches.empty()) fail("'{}' must be a non-empty array of schemas", key);
      std::vector<int> alternatives;
      for (const json& b : branches) alternatives.push_back(notation_value(b, depth + 1));
      if (std::string(key) == "oneOf" && !exclusive(branches, alternatives))
        fail("'oneOf' whose branches a value could match two of is not supported");
      return add_union(std::move(alternatives));
    }
    std::vector<std::string> fixed;
    if (auto c = s.find("const"); c != s.end()) fixed.push_back(value_text(*c));
    if (auto e = s.find("enum"); e != s.end() && fixed.empty()) {
      if (!e->is_array() || e->empty()) fail("'enum' must be a non-empty array");
      if (e->size() > kMaxGrammarLiterals) fail("'enum' may list at most {} values", kMaxGrammarLiterals);
      for (const json& v : *e) fixed.push_back(value_text(v));
    }
    if (!fixed.empty()) return literals(std::move(fixed));
    std::vector<std::string> types;
    if (auto type = s.find("type"); type != s.end()) {
      if (type->is_string()) types.push_back(type->get<std::string>());
      if (type->is_array())
        for (const json& t : *type)
          if (t.is_string()) types.push_back(t.get<std::string>());
      if (types.empty() || (type->is_array() && types.size() != type->size()))
        fail("'type' must be a type name or a non-empty list of them");
    } else if (s.contains("properties") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types.push_back("string");
    } else {
      return notation_any();
    }
    std::vector<int> alternatives;
    const bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
    for (const std::string& t : types) {
      if (t == "string") {
        alternatives.push_back(notation_string(s));
      } else if (t == "object") {
        const int members = call_members(s.contains("type") ? object_part(s) : s, depth + 1, false);
        alternatives.push_back(add_sequence({{"{", -1}, {"", members}}));
      } else if (t == "array") {
        const uint32_t min_items = count_field(s, "minItems", 0);
        if (min_items > 1) fail("'minItems' above 1 is not supported in {} tool calls", notation_name());
        const int item = s.contains("items") ? notation_value(s["items"], depth + 1) : notation_any();
        alternatives.push_back(add_sequence({{"[", -1}, {"", notation_items(item, min_items)}}));
      } else if (t == "integer" && has_number) {
        continue;  // a number already allows every integer
      } else if (python() && t == "boolean") {
        alternatives.push_back(literals({"True", "False"}));
      } else if (python() && t == "null") {
        alternatives.push_back(literals({"None"}));
      } else if (t == "number" || t == "integer" || t == "boolean" || t == "null") {
        alternatives.push_back(typed(s, t, depth));  // written as JSON writes them
      } else {
        fail("unknown type '{}'", t);
      }
    }
    return alternatives.size() == 1 ? alternatives[0] : add_union(std::move(alternatives));
  }

  // An object schema's own keywords, for a value whose "type" lists more than the object.
  static json object_part(const json& s) {
    json o = s;
    o["type"] = "object";
    return o;
  }

 public:
  int any_object() {
    GrammarNode object;
    object.kind = GrammarNode::Kind::Object;
    object.values = any();
    return add(object);
  }

  int compile(const json& s, int depth = 0) {
    if (depth > kMaxSchemaDepth) fail("the schema nests deeper than {}", kMaxSchemaDepth);
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("a schema of false allows no value");
      return any();
    }
    if (!s.is_object()) fail("a schema must be an object, got {}", json_text(s));
    for (const char* keyword : kUnsupported)
      if (s.contains(keyword)) fail("the schema keyword '{}' is not supported", keyword);
    // uniqueItems is taken where the items come from a fixed list (the array's branch below); without items
    // any value may come twice.
    if (s.contains("uniqueItems") && s["uniqueItems"] == true && !s.contains("items"))
      fail("the schema keyword 'uniqueItems' is supported only over items from an enum, const or boolean");
    if (auto ref = s.find("$ref"); ref != s.end()) {
      // Keywords beside a $ref apply too (JSON Schema 2019-09 on): the two merged as an allOf, unless the target
      // says the same already (a recursive schema's "type" repeated beside its $ref stays a reference).
      const json* target = ref->is_string() ? lookup(ref->get<std::string>()) : nullptr;
      for (auto it = s.begin(); it != s.end(); ++it) {
        const std::string& key = it.key();
        if (key == "$ref" || key == "$defs" || key == "definitions" ||
            std::find(kAnnotations.begin(), kAnnotations.end(), key) != kAnnotations.end())
          continue;
        if (target == nullptr || !target->is_object() || !target->contains(key) || (*target)[key] != it.value())
          return compile(merge_all_of(s, depth), depth + 1);
      }
      return reference(*ref, depth);
    }
    if (s.contains("allOf")) return compile(merge_all_of(s, depth), depth + 1);
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& branches = s[key];
      if (!branches.is_array() || branches.empty()) fail("'{}' must be a non-empty array of schemas", key);
      GrammarNode u;
      u.kind = GrammarNode::Kind::Union;
      for (const json& b : branches) u.alternatives.push_back(compile(b, depth + 1));
      // oneOf: a value must match exactly one branch; enforced where no value can match two.
      if (std::string(key) == "oneOf" && !exclusive(branches, u.alternatives))
        fail(
            "'oneOf' whose branches a value could match two of is not supported (they must start with different "
            "characters, or be objects with a required property whose const / enum values differ)");
      return add(std::move(u));
    }
    if (auto c = s.find("const"); c != s.end()) return literals({json_text(*c)});
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) fail("'enum' must be a non-empty array");
      if (e->size() > kMaxGrammarLiterals) fail("'enum' may list at most {} values", kMaxGrammarLiterals);
      std::vector<std::string> texts;
      for (const json& v : *e) texts.push_back(json_text(v));
      return literals(std::move(texts));
    }
    auto type = s.find("type");
    if (type == s.end()) {
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
        return typed(s, "object", depth);
      if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems"))
        return typed(s, "array", depth);
      if (s.contains("minProperties") || s.contains("maxProperties")) return typed(s, "object", depth);
      if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) return typed(s, "string", depth);
      for (const char* key : kBounds)
        if (s.contains(key)) return typed(s, "number", depth);
      if (s.contains("multipleOf")) return typed(s, "number", depth);
      return any();
    }
    if (type->is_string()) return typed(s, type->get<std::string>(), depth);
    if (!type->is_array() || type->empty()) fail("'type' must be a type name or a non-empty list of them");
    const bool has_number = std::find(type->begin(), type->end(), json("number")) != type->end();
    GrammarNode u;
    u.kind = GrammarNode::Kind::Union;
    for (const json& t : *type) {
      if (!t.is_string()) fail("'type' must be a type name or a non-empty list of them");
      if (has_number && t == "integer") continue;  // a number already allows every integer
      u.alternatives.push_back(typed(s, t.get<std::string>(), depth));
    }
    return u.alternatives.size() == 1 ? u.alternatives[0] : add(std::move(u));
  }

 private:
  int reference(const json& ref, int depth) {
    if (!ref.is_string()) fail("'$ref' must be a string");
    const std::string path = ref.get<std::string>();
    if (auto it = refs_.find(path); it != refs_.end()) return it->second;
    const json* target = lookup(path);
    if (target == nullptr) fail("'$ref' '{}' does not name a schema in #/$defs or #/definitions", path);
    // A placeholder first, so a schema that refers to itself refers to this node.
    GrammarNode u;
    u.kind = GrammarNode::Kind::Union;
    const int id = add(u);
    refs_[path] = id;
    const int body = compile(*target, depth + 1);
    grammar_.nodes[static_cast<size_t>(id)].alternatives = {body};
    return id;
  }

  // allOf as one schema: its parts (each $ref followed, the keywords beside a $ref or an allOf kept as a part
  // of their own) merged keyword by keyword where the result allows exactly the values every part allows:
  // properties joined (a property in several parts: the allOf of its schemas), required joined, types
  // intersected, the tighter of each bound, enums intersected, items and additionalProperties schemas as
  // allOfs. What cannot be merged so is refused by name.
  json merge_all_of(const json& s, int depth) const {
    std::vector<json> parts;
    int visits = 0;  // $refs met twice are read twice: a cap keeps a doubling chain from exploding
    const std::function<void(const json&, int)> collect = [&](const json& p, int d) {
      if (d > kMaxSchemaDepth) fail("the schema nests deeper than {}", kMaxSchemaDepth);
      if (++visits > kMaxAllOfParts)
        fail("an 'allOf' that expands to more than {} schemas is not supported", kMaxAllOfParts);
      if (p.is_boolean()) {
        if (!p.get<bool>()) fail("an 'allOf' part of false allows no value");
        return;
      }
      if (!p.is_object()) fail("a schema must be an object, got {}", json_text(p));
      json rest = p;
      if (auto ref = p.find("$ref"); ref != p.end()) {
        if (!ref->is_string()) fail("'$ref' must be a string");
        const json* target = lookup(ref->get<std::string>());
        if (target == nullptr)
          fail("'$ref' '{}' does not name a schema in #/$defs or #/definitions", ref->get<std::string>());
        collect(*target, d + 1);
        rest.erase("$ref");
      }
      if (auto all = p.find("allOf"); all != p.end()) {
        if (!all->is_array() || all->empty()) fail("'allOf' must be a non-empty array of schemas");
        for (const json& q : *all) collect(q, d + 1);
        rest.erase("allOf");
      }
      rest.erase("$defs");
      rest.erase("definitions");
      if (!rest.empty()) parts.push_back(std::move(rest));
    };
    collect(s, depth);
    json out = json::object();
    for (const json& part : parts) {
      for (auto it = part.begin(); it != part.end(); ++it) {
        const std::string& key = it.key();
        const json& value = it.value();
        if (!out.contains(key)) {
          out[key] = value;
          continue;
        }
        json& have = out[key];
        if (have == value || std::find(kAnnotations.begin(), kAnnotations.end(), key) != kAnnotations.end()) continue;
        merge_keyword(key, have, value);
      }
    }
    if (out.contains("properties") && !out["properties"].is_object()) fail("'properties' must be an object");
    // A part that forbids other properties must list every property another part names.
    for (const json& part : parts) {
      if (part.value("additionalProperties", json(true)) != json(false) || !out.contains("properties")) continue;
      const json props = part.value("properties", json::object());
      for (auto it = out["properties"].begin(); it != out["properties"].end(); ++it)
        if (!props.is_object() || !props.contains(it.key()))
          fail("an 'allOf' part with additionalProperties false does not list '{}', which another part names",
               it.key());
    }
    if (out.contains("const") && out.contains("enum") &&
        (!out["enum"].is_array() ||
         std::find(out["enum"].begin(), out["enum"].end(), out["const"]) == out["enum"].end()))
      fail("'allOf' whose parts' const and enum have no value in common");
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!out.contains(key)) continue;
      for (auto it = out.begin(); it != out.end(); ++it)
        if (it.key() != key && std::find(kAnnotations.begin(), kAnnotations.end(), it.key()) == kAnnotations.end())
          fail("'allOf' with '{}' in one part and '{}' in another is not supported", key, it.key());
    }
    return out;
  }

  static void merge_keyword(const std::string& key, json& have, const json& value) {
    const auto number = [&](const json& v) {
      if (!v.is_number()) fail("'{}' must be a number", key);
      return v.get<double>();
    };
    if (key == "properties" && have.is_object() && value.is_object()) {
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!have.contains(it.key())) {
          have[it.key()] = it.value();
        } else if (have[it.key()] != it.value()) {
          have[it.key()] = json{{"allOf", json::array({have[it.key()], it.value()})}};
        }
      }
    } else if (key == "required" && have.is_array() && value.is_array()) {
      for (const json& name : value)
        if (std::find(have.begin(), have.end(), name) == have.end()) have.push_back(name);
    } else if (key == "type") {
      const auto names = [](const json& t) {
        std::set<std::string> out;
        for (const json& n : t.is_array() ? t : json::array({t}))
          if (n.is_string()) out.insert(n.get<std::string>());
        return out;
      };
      const std::set<std::string> a = names(have), b = names(value);
      std::set<std::string> common;
      for (const std::string& t : a) {
        if (b.count(t)) {
          common.insert(t);
        } else if ((t == "integer" && b.count("number")) || (t == "number" && b.count("integer"))) {
          common.insert("integer");  // every integer is a number
        }
      }
      const json both(common);
      if (both.empty())
        fail("'allOf' whose parts' types ({} and {}) have no value in common", json_text(have), json_text(value));
      have = both.size() == 1 ? both[0] : both;
    } else if (key == "minimum" || key == "exclusiveMinimum" || key == "minLength" || key == "minItems" ||
               key == "minProperties") {
      have = number(value) > number(have) ? value : have;
    } else if (key == "maximum" || key == "exclusiveMaximum" || key == "maxLength" || key == "maxItems" ||
               key == "maxProperties") {
      have = number(value) < number(have) ? value : have;
    } else if (key == "enum" && have.is_array() && value.is_array()) {
      json both = json::array();
      for (const json& v : have)
        if (std::find(value.begin(), value.end(), v) != value.end()) both.push_back(v);
      if (both.empty()) fail("'allOf' whose parts' enums have no value in common");
      have = std::move(both);
    } else if ((key == "items" || key == "additionalProperties" || key == "additionalItems") && !have.is_array() &&
               !value.is_array()) {
      if (have == json(false) || value == json(false)) {
        have = false;
      } else if (have == json(true)) {
        have = value;
      } else if (value != json(true)) {
        have = json{{"allOf", json::array({have, value})}};
      }
    } else {
      fail("'allOf' whose parts give '{}' different values ({} and {}) is not supported", key, json_text(have),
           json_text(value));
    }
  }

  // The schema a $ref chain leads to (itself where it is not one); null where it leads nowhere.
  const json* resolve(const json& s, int depth = 0) const {
    if (depth > kMaxSchemaDepth || !s.is_object() || !s.contains("$ref")) return &s;
    const json& ref = s["$ref"];
    if (!ref.is_string()) return nullptr;
    const json* target = lookup(ref.get<std::string>());
    return target ? resolve(*target, depth + 1) : nullptr;
  }

  // The schema a $ref path names: "#", or a name in #/$defs or #/definitions; null otherwise.
  const json* lookup(const std::string& path) const {
    if (path == "#") return root_;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p(prefix);
      if (path.compare(0, p.size(), p) != 0) continue;
      const std::string section = p.substr(2, p.size() - 3), name = path.substr(p.size());
      if (root_->contains(section) && (*root_)[section].is_object() && (*root_)[section].contains(name))
        return &(*root_)[section][name];
    }
    return nullptr;
  }

  // The const / enum values a required property allows in an object schema (empty: none such).
  std::set<std::string> fixed_values(const json* schema, const std::string& key) const {
    std::set<std::string> out;
    if (!schema || !schema->is_object() || !schema->contains("properties") || !(*schema)["properties"].is_object())
      return out;
    const json req = schema->value("required", json::array());
    if (!req.is_array() || std::find(req.begin(), req.end(), json(key)) == req.end()) return out;
    const json& props = (*schema)["properties"];
    const json* prop = props.contains(key) ? resolve(props[key]) : nullptr;
    if (!prop || !prop->is_object()) return out;
    if (prop->contains("const")) {
      out.insert(json_text((*prop)["const"]));
    } else if (prop->contains("enum") && (*prop)["enum"].is_array()) {
      for (const json& v : (*prop)["enum"]) out.insert(json_text(v));
    }
    return out;
  }

  // Whether no value can match two of the branches: for each pair, their texts start with different bytes,
  // or both are objects that require a property whose allowed values (const / enum) they do not share.
  bool exclusive(const json& branches, const std::vector<int>& nodes) const {
    std::map<int, std::bitset<256>> memo;
    for (size_t i = 0; i < nodes.size(); ++i)
      for (size_t j = i + 1; j < nodes.size(); ++j) {
        if ((first_bytes(nodes[i], 0, &memo) & first_bytes(nodes[j], 0, &memo)).none()) continue;
        const json* a = resolve(branches[i]);
        const json* b = resolve(branches[j]);
        bool apart = false;
        if (a && a->is_object() && a->contains("properties") && a->at("properties").is_object())
          for (auto it = a->at("properties").begin(); it != a->at("properties").end() && !apart; ++it) {
            const std::set<std::string> va = fixed_values(a, it.key()), vb = fixed_values(b, it.key());
            if (va.empty() || vb.empty()) continue;
            apart = std::none_of(va.begin(), va.end(), [&](const std::string& v) { return vb.count(v) != 0; });
          }
        if (!apart) return false;
      }
    return true;
  }

  static uint32_t count_field(const json& s, const char* key, uint32_t fallback) {
    if (!s.is_object() || !s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > UINT32_MAX)
      fail("'{}' must be a non-negative integer", key);
    return static_cast<uint32_t>(v.get<int64_t>());
  }

  // A string node's pattern. With minLength / maxLength the automaton knows the lengths it can finish in up
  // to a cap: longer strings are still valid, just not written.
  static void set_pattern(GrammarNode& n, const std::string& pattern, TextPattern::Mode mode, const char* keyword) {
    const bool lengths = n.min_items > 0 || n.max_items != UINT32_MAX;
    if (lengths) {
      if (n.min_items >= TextPattern::kLengthCap)
        fail("'minLength' above {} together with '{}' is not supported", TextPattern::kLengthCap - 1, keyword);
      n.max_items = std::min(n.max_items, TextPattern::kLengthCap - 1);
    }
    n.pattern = TextPattern::compile(pattern, mode, lengths);
  }

  // uniqueItems: each item takes one of the items' texts not taken yet, where the items come from a list of
  // texts (enum, const, boolean); a value written two ways (1 and 1.0) counts once. Other items are refused.
  void unique_items(GrammarNode& n) const {
    const GrammarNode* items = n.items >= 0 ? &grammar_.nodes[static_cast<size_t>(n.items)] : nullptr;
    if (!n.tuple.empty() || items == nullptr || items->kind != GrammarNode::Kind::Literals ||
        items->literals.size() > 64)
      fail(
          "the schema keyword 'uniqueItems' is supported only over items from an enum, const or boolean "
          "(at most 64 values, no prefixItems)");
    std::vector<json> values;
    for (const std::string& t : items->literals) {
      values.push_back(json::parse(t, nullptr, false));
      if (values.back().is_discarded()) fail("'uniqueItems' over items that are not JSON values");
    }
    n.same_value.assign(values.size(), 0);
    for (size_t i = 0; i < values.size(); ++i)
      for (size_t j = 0; j < values.size(); ++j)
        if (values[i] == values[j]) n.same_value[i] |= uint64_t{1} << j;
    uint32_t distinct = 0;
    uint64_t counted = 0;
    for (size_t i = 0; i < values.size(); ++i)
      if (!(counted >> i & 1)) ++distinct, counted |= n.same_value[i];
    if (n.min_items > distinct) fail("'minItems' is above the {} distinct values unique items can take", distinct);
    n.max_items = std::min(n.max_items, distinct);
  }

  // minimum / maximum / exclusiveMinimum / exclusiveMaximum as [low, high] in the node's units.
  static void bounds(const json& s, GrammarNode& n) {
    const int digits = n.kind == GrammarNode::Kind::Number ? kBoundedFractionDigits : 0;
    Int128 low = -kBeyond, high = kBeyond;
    for (const char* key : kBounds) {
      if (!s.contains(key)) continue;
      const json& v = s[key];
      if (v.is_boolean()) fail("'{}' must be a number (a boolean is draft 4's form)", key);
      const std::string k = key;
      if (k == "minimum") low = std::max(low, scaled_bound(v, digits, true, key));
      if (k == "exclusiveMinimum") low = std::max(low, scaled_bound(v, digits, false, key) + 1);
      if (k == "maximum") high = std::min(high, scaled_bound(v, digits, false, key));
      if (k == "exclusiveMaximum") high = std::min(high, scaled_bound(v, digits, true, key) - 1);
      n.bounded = true;
    }
    if (s.contains("multipleOf")) {
      n.step = multiple_step(s["multipleOf"], digits);
      n.bounded = true;
    }
    if (!n.bounded) return;
    const Int128 largest = pow10(18 + digits) - 1;  // what 18 integer digits and the fraction reach
    if (!holds_multiple(std::max(low, -largest), std::min(high, largest), n.step))
      fail("the schema's minimum / maximum{} leave no {} to write", n.step != 0 ? " / multipleOf" : "",
           digits == 0 ? "integer" : "number");
    n.low = low;
    n.high = high;
  }

  int typed(const json& s, const std::string& type, int depth) {
    GrammarNode n;
    if (type == "object") {
      n.kind = GrammarNode::Kind::Object;
      std::vector<std::string> required;
      if (s.contains("required")) {
        if (!s["required"].is_array()) fail("'required' must be an array of property names");
        for (const json& r : s["required"]) {
          if (!r.is_string()) fail("'required' must be an array of property names");
          required.push_back(r.get<std::string>());
        }
      }
      if (s.contains("properties") && !s["properties"].is_object()) fail("'properties' must be an object");
      const json props = s.value("properties", json::object());
      if (props.size() > kMaxGrammarProperties)
        fail("an object may have at most {} properties", kMaxGrammarProperties);
      for (const auto& [key, sub] : props.items()) {
        GrammarNode::Property p;
        const std::string quoted = json_text(json(key));
        p.key = quoted.substr(1, quoted.size() - 2);
        p.required = std::find(required.begin(), required.end(), key) != required.end();
        p.node = compile(sub, depth + 1);
        n.properties.push_back(std::move(p));
      }
      for (const std::string& r : required)
        if (!props.contains(r)) fail("the required property '{}' is not among the schema's properties", r);
      if (n.properties.empty()) {
        const json additional = s.value("additionalProperties", json(true));
        n.values = additional == false ? -1 : compile(additional, depth + 1);
      }
      n.min_items = count_field(s, "minProperties", 0);
      n.max_items = count_field(s, "maxProperties", UINT32_MAX);
      // Free keys may repeat, and a reader keeps one of each: the count written proves at most one.
      if (n.properties.empty() && n.min_items > (n.values < 0 ? 0u : 1u))
        fail("'minProperties' above 1 without 'properties' is not supported");
      if (!n.properties.empty() && n.min_items > n.properties.size())
        fail("'minProperties' is above the number of properties the schema allows");
      if (n.min_items > n.max_items || required.size() > n.max_items)
        fail("'maxProperties' leaves no room for the required properties or minProperties");
    } else if (type == "array") {
      n.kind = GrammarNode::Kind::Array;
      n.min_items = count_field(s, "minItems", 0);
      n.max_items = count_field(s, "maxItems", UINT32_MAX);
      // The first items' own schemas: prefixItems (then items for the rest), or draft 7's items list (then
      // additionalItems). A rest of false allows no more.
      const json* tuple = nullptr;
      const json* rest = nullptr;
      if (s.contains("prefixItems")) {
        if (s.contains("items") && s["items"].is_array()) fail("'prefixItems' and a list of 'items' together");
        tuple = &s["prefixItems"];
        if (s.contains("items")) rest = &s["items"];
      } else if (s.contains("items") && s["items"].is_array()) {
        tuple = &s["items"];
        if (s.contains("additionalItems")) rest = &s["additionalItems"];
      } else if (s.contains("items")) {
        rest = &s["items"];
      }
      if (tuple) {
        if (!tuple->is_array()) fail("'prefixItems' must be an array of schemas");
        if (tuple->size() > kMaxGrammarLiterals) fail("at most {} prefixItems", kMaxGrammarLiterals);
        for (const json& t : *tuple) n.tuple.push_back(compile(t, depth + 1));
      }
      if (rest && *rest == false) {
        n.items = -1;
        n.max_items = std::min<uint32_t>(n.max_items, static_cast<uint32_t>(n.tuple.size()));
      } else {
        n.items = rest ? compile(*rest, depth + 1) : any();
      }
      if (n.min_items > n.max_items) fail("'minItems' is above 'maxItems' (or the items a tuple allows)");
      if (s.contains("uniqueItems") && s["uniqueItems"] == true) unique_items(n);
    } else if (type == "string") {
      n.kind = GrammarNode::Kind::String;
      n.min_items = count_field(s, "minLength", 0);
      n.max_items = count_field(s, "maxLength", UINT32_MAX);
      if (n.min_items > n.max_items) fail("'minLength' is above 'maxLength'");
      if (s.contains("pattern")) {
        if (!s["pattern"].is_string()) fail("'pattern' must be a string");
        set_pattern(n, s["pattern"].get<std::string>(), TextPattern::Mode::Search, "pattern");
      } else if (s.contains("format") && s["format"].is_string()) {
        // A format beside a pattern stays an annotation; alone, one known here is written to its definition.
        const std::string pattern = format_pattern(s["format"].get<std::string>());
        if (!pattern.empty()) set_pattern(n, pattern, TextPattern::Mode::FullMatch, "format");
      }
    } else if (type == "number" || type == "integer") {
      n.kind = type == "number" ? GrammarNode::Kind::Number : GrammarNode::Kind::Integer;
      bounds(s, n);
    } else if (type == "boolean") {
      return literals({"true", "false"});
    } else if (type == "null") {
      return literals({"null"});
    } else {
      fail("unknown schema type '{}'", type);
    }
    return add(std::move(n));
  }

  // The bytes a node's text can start with; `memo` keeps the unions' and sequences' for one caller (a schema's
  // $refs share nodes, which a walk without it would visit once per path).
  std::bitset<256> first_bytes(int id, int depth = 0, std::map<int, std::bitset<256>>* memo = nullptr) const {
    if (memo)
      if (auto it = memo->find(id); it != memo->end()) return it->second;
    std::bitset<256> out;
    if (depth > 256) return out;
    const GrammarNode& n = grammar_.nodes[static_cast<size_t>(id)];
    switch (n.kind) {
      case GrammarNode::Kind::Object:
        out.set('{');
        break;
      case GrammarNode::Kind::Array:
        out.set('[');
        break;
      case GrammarNode::Kind::String:
        out.set('"');
        break;
      case GrammarNode::Kind::Number:
      case GrammarNode::Kind::Integer:
        out.set('-');
        for (char c = '0'; c <= '9'; ++c) out.set(static_cast<unsigned char>(c));
        break;
      case GrammarNode::Kind::Literals:
      case GrammarNode::Kind::Branches:
        for (const std::string& l : n.literals)
          if (!l.empty()) out.set(static_cast<unsigned char>(l[0]));
        break;
      case GrammarNode::Kind::Union:
        for (int a : n.alternatives) out |= first_bytes(a, depth + 1, memo);
        break;
      case GrammarNode::Kind::Until:
        out.set();  // any byte
        break;
      case GrammarNode::Kind::Regex:
        for (const TextPattern::Edge& e : n.pattern->edges(n.pattern->start())) {
          for (uint32_t c = e.lo; c <= std::min<uint32_t>(e.hi, 0x7F); ++c) out.set(c);
          if (e.hi >= 0x80)
            for (size_t b = 0xC2; b <= 0xF4; ++b) out.set(b);  // any lead byte: the union check errs on caution
        }
        break;
      case GrammarNode::Kind::Sequence:
        for (const GrammarNode::Part& part : n.parts) {
          if (part.node < 0) {
            out.set(static_cast<unsigned char>(part.text[0]));
            break;
          }
          out |= first_bytes(part.node, depth + 1, memo);
          if (!part.optional) break;
        }
        break;
    }
    if (memo) (*memo)[id] = out;
    return out;
  }

  const json* root_;
  Grammar grammar_;
  std::map<std::string, int> refs_;
  int any_ = -1;
  ArgumentNotation notation_ = ArgumentNotation::Gemma4;
  std::map<std::string, int> notation_refs_;
  int notation_any_ = -1;
};

}  // namespace

Grammar finish_grammar(std::vector<GrammarNode> nodes, int root) {
  SchemaCompiler c{json()};
  c.adopt(std::move(nodes));
  return c.take(root);
}

std::shared_ptr<const Grammar> json_object_grammar() {
  static const std::shared_ptr<const Grammar> grammar = [] {
    SchemaCompiler c{json()};
    const int root = c.any_object();
    return std::make_shared<const Grammar>(c.take(root));
  }();
  return grammar;
}

std::shared_ptr<const Grammar> json_schema_grammar(const json& schema) {
  SchemaCompiler c(schema);
  const int root = c.compile(schema);
  return std::make_shared<const Grammar>(c.take(root));
}

std::shared_ptr<const Grammar> regex_grammar(const std::string& pattern) {
  SchemaCompiler c{json()};
  GrammarNode n;
  n.kind = GrammarNode::Kind::Regex;
  n.pattern = TextPattern::compile(pattern, TextPattern::Mode::FullMatch);
  return std::make_shared<const Grammar>(c.take(c.add(std::move(n))));
}

std::shared_ptr<const Grammar> text_choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) fail("no choices to pick from");
  if (choices.size() > kMaxGrammarLiterals) fail("at most {} choices", kMaxGrammarLiterals);
  for (const std::string& c : choices)
    if (c.empty()) fail("a choice is empty");
  SchemaCompiler c{json()};
  return std::make_shared<const Grammar>(c.take(c.literals(choices)));
}

std::shared_ptr<const Grammar> after_reasoning(const std::shared_ptr<const Grammar>& grammar, bool opened,
                                               const std::string& open_tag, const std::string& close_tag,
                                               const std::string& after_close) {
  SchemaCompiler c{json()};
  c.adopt(*grammar);
  GrammarNode until;
  until.kind = GrammarNode::Kind::Until;
  until.literals = {close_tag};
  const int until_id = c.add(std::move(until));
  GrammarNode think;
  think.kind = GrammarNode::Kind::Sequence;
  if (!opened) think.parts.push_back({open_tag, -1});
  think.parts.push_back({"", until_id});
  if (!after_close.empty()) think.parts.push_back({after_close, -1});
  think.parts.push_back({"", grammar->root});
  const int think_id = c.add(std::move(think));
  if (opened) {
    // The block is open already: the reply cannot be empty (an empty grammar's reply is the block alone).
    Grammar g = c.take(think_id);
    g.may_be_empty = false;
    return std::make_shared<const Grammar>(std::move(g));
  }
  GrammarNode either;
  either.kind = GrammarNode::Kind::Union;
  either.alternatives = {think_id, grammar->root};
  const int root = c.add(std::move(either));
  return std::make_shared<const Grammar>(c.take(root));
}

std::shared_ptr<const Grammar> after_text(const std::string& text, const std::shared_ptr<const Grammar>& grammar) {
  if (text.empty()) return grammar;
  SchemaCompiler c{json()};
  c.adopt(*grammar);
  GrammarNode seq;
  seq.kind = GrammarNode::Kind::Sequence;
  seq.parts = {{text, -1}, {"", grammar->root}};
  Grammar g = c.take(c.add(std::move(seq)));
  g.may_be_empty = false;
  return std::make_shared<const Grammar>(std::move(g));
}

std::shared_ptr<const Grammar> tool_call_grammar(const std::string& prefix, const std::vector<ToolCallShape>& calls,
                                                 const std::string& suffix) {
  if (calls.empty()) fail("a tool call grammar needs a tool");
  if (calls.size() > kMaxGrammarLiterals) fail("at most {} tools can be required at once", kMaxGrammarLiterals);
  SchemaCompiler c{json()};
  GrammarNode branches;
  branches.kind = GrammarNode::Kind::Branches;
  for (const ToolCallShape& call : calls) {
    if (call.head.empty()) fail("a tool call's head is empty");
    for (const std::string& other : branches.literals)
      if (other.compare(0, call.head.size(), call.head) == 0 || call.head.compare(0, other.size(), other) == 0)
        fail("the tool calls '{}' and '{}' start alike", other, call.head);
    c.set_root(call.parameters);
    GrammarNode rest;
    rest.kind = GrammarNode::Kind::Sequence;
    if (call.xml) {
      rest.parts.push_back({"", c.xml_arguments(call.parameters, *call.xml, call.tail)});
    } else if (call.notation != ArgumentNotation::Json) {
      const bool python = call.notation == ArgumentNotation::Python;
      if (call.head.back() != (python ? '(' : '{')) fail("a tool call's head must end with its arguments' bracket");
      c.set_notation(call.notation);
      rest.parts.push_back({"", c.call_members(call.parameters, 0)});
      if (!call.tail.empty()) rest.parts.push_back({call.tail, -1});
    } else {
      rest.parts.push_back({"", call.parameters.is_null() ? c.any_object() : c.compile(call.parameters)});
      if (!call.tail.empty()) rest.parts.push_back({call.tail, -1});
    }
    branches.literals.push_back(call.head);
    branches.alternatives.push_back(c.add(std::move(rest)));
  }
  GrammarNode seq;
  seq.kind = GrammarNode::Kind::Sequence;
  if (!prefix.empty()) seq.parts.push_back({prefix, -1});
  seq.parts.push_back({"", c.add(std::move(branches))});
  if (!suffix.empty()) seq.parts.push_back({suffix, -1});
  const int root = c.add(std::move(seq));
  return std::make_shared<const Grammar>(c.take(root));
}

}  // namespace kvserve
