// Structured output (src/engine/json_grammar.h, grammar_matcher.h), against independent references: the
// official JSON Schema test suite (draft 7, Debian's json-schema-test-suite) says which instances are valid,
// and valijson (Debian's libvalijson-dev) validates what random walks through a real vocabulary's masks write.
// Sound: no instance the suite calls invalid is ever accepted, for every schema the compiler takes (the ones
// it refuses are refused with a message). The masks' fast paths (first byte, plain string text) allow exactly
// the tokens a full check of each token allows.
#define VALIJSON_USE_EXCEPTIONS 1
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>
#include <vector>

#include "core/error.h"
#include "engine/grammar_matcher.h"
#include "engine/json_grammar.h"
#include "grammar_checks.h"
#include "model/loaders.h"
#include "model/model_cache.h"
#include "model/tokenizer.h"
#include "server/tool_call_parser.h"

namespace kvserve {
namespace {

using json = nlohmann::ordered_json;

TEST(JsonGrammar, HandPickedTextsOfSchemas) {
  struct Case {
    const char* schema;
    std::vector<std::string> good, bad;
  };
  const std::vector<Case> cases = {
      {R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name"]})",
       {R"({"name":"Ann","age":31})", R"({"name":"Ann"})", "{ \"name\" : \"A\\u00e9\\n\" ,\n \"age\": -0 }"},
       {R"({"age":31,"name":"Ann"})", R"({"age":31})", R"({"name":"Ann","age":3.5})", R"({"name":"Ann","x":1})", "{}",
        R"({"name":"Ann",})", R"({"name":Ann})", R"({"name":"Ann"} )", R"({"name":"\x"})", "{\"name\":\"a\nb\"}"}},
      {R"({"type": "array", "items": {"enum": ["red", "green", 3, null]}, "minItems": 1, "maxItems": 2})",
       {R"(["red"])", R"([3,null])", "[ \"green\" ]"},
       {"[]", R"(["red","red","red"])", R"(["blue"])", R"([30])", R"(["re"])"}},
      {R"({"type": ["string", "null"], "maxLength": 3})",
       {R"("abc")", "null", R"("é€😀")", R"("")"},
       {R"("abcd")", "nul", "1"}},
      {R"({"type": "number"})", {"0", "-1.5e+10", "12", "3.25E-2"}, {"01", "-", "1.", ".5", "1e", "+1", "NaN"}},
      {R"({"type": "string", "minLength": 2})", {R"("ab")", R"("\"\\")"}, {R"("a")", R"("")"}},
      {R"({"anyOf": [{"type": "integer"}, {"type": "object", "additionalProperties": {"type": "boolean"}}]})",
       {"7", R"({"a":true,"b":false})", "{}"},
       {R"({"a":1})", "7.5", "true"}},
      {R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}}, "$ref": "#/$defs/node"})",
       {R"({"v":1,"next":{"v":2,"next":null}})"},
       {R"({"v":1})", R"({"v":1,"next":{"v":2}})"}},
      {R"({"const": {"a": [1, "x"]}})", {R"({"a":[1,"x"]})"}, {R"({"a":[1,"y"]})", R"({"a": [1, "x"]})"}},
      {"true", {"1", R"({"a":[true,{"b":null}]})", R"("s")", "[]"}, {"{", "tru", "[1,]"}},
      {R"({"type": "integer", "minimum": 3, "maximum": 120})",
       {"3", "120", "7", "99"},
       {"2", "121", "-3", "0", "1200", "03", "-0", "3.0"}},
      {R"({"type": "integer", "exclusiveMinimum": -5.5, "exclusiveMaximum": 0})",
       {"-5", "-1", "-4"},
       {"-6", "0", "-0", "1", "5"}},
      {R"({"type": "number", "exclusiveMinimum": 0, "maximum": 1.5})",
       {"0.5", "1.5", "1", "0.000000000001", "1.25"},
       {"0", "0.0", "-0.1", "1.51", "2", "1e0", "-0", "1.500000000001"}},
      {R"({"type": "number", "minimum": -0.25, "maximum": -0.25})",
       {"-0.25", "-0.250"},
       {"-0.2", "-0.26", "0.25", "-0"}},
      {R"({"maximum": 10})", {"10", "-7.5"}, {"11", "10.5", R"("a")"}},
      // uniqueItems over a fixed list of values: each item one not written yet (1 and 1.0 are one value).
      {R"({"type": "array", "items": {"enum": ["red", "green", "blue"]}, "uniqueItems": true})",
       {"[]", R"(["red"])", R"(["red","green","blue"])", R"([ "blue" , "red" ])"},
       {R"(["red","red"])", R"(["red","green","red"])", R"(["red","green","blue","red"])"}},
      {R"({"type": "array", "items": {"type": "boolean"}, "uniqueItems": true, "minItems": 2})",
       {"[true,false]", "[false, true]"},
       {"[true,true]", "[true]", "[true,false,true]"}},
      {R"({"type": "array", "items": {"enum": [1, 1.0, 2]}, "uniqueItems": true})",
       {"[1,2]", "[1.0]", "[2,1.0]"},
       {"[1,1.0]", "[1.0,1]", "[2,2]"}},
      {R"({"type": "array", "items": {"enum": ["a", "ab"]}, "uniqueItems": true})",
       {R"(["ab","a"])", R"(["a","ab"])"},
       {R"(["a","a"])", R"(["ab","ab"])"}},
      {R"({"type": "array", "items": {"enum": ["x", "y"]}, "uniqueItems": false})", {R"(["x","x"])"}, {R"(["z"])"}},
      // multipleOf on the decimals written, exactly (0.3 is a multiple of 0.1 though not in binary floats).
      {R"({"type": "integer", "multipleOf": 3})",
       {"0", "3", "-6", "999999999999999999", "-0"},
       {"1", "-4", "10", "3.0", "1000000000000000000"}},
      {R"({"type": "integer", "multipleOf": 2.5})", {"5", "-10", "0"}, {"2", "7", "2.5"}},
      {R"({"type": "number", "multipleOf": 0.25, "minimum": -1, "maximum": 1})",
       {"0.25", "-1", "0.5", "1.00", "-0.75", "0", "0.250000000000"},
       {"0.1", "1.25", "0.2", "-1.25", "0.255", "2", "0.25e0"}},
      {R"({"type": "number", "multipleOf": 0.1})", {"0.3", "1.7", "-2", "0.30"}, {"0.35", "0.01", "3e1"}},
      {R"({"multipleOf": 7})", {"14", "-7", "0"}, {"15", "7.5", R"("a")"}},
      {R"({"type": "integer", "multipleOf": 1e20})", {"0"}, {"1", "100000000000000000"}},
      {R"({"type": "integer", "minimum": 10, "maximum": 20, "multipleOf": 7})", {"14"}, {"7", "21", "1", "2", "0"}},
      {R"({"type": "number", "multipleOf": 1e-15, "maximum": 1})", {"0.000000000001", "1"}, {"1.000000000001"}},
      {R"({"type": "string", "pattern": "^[a-z]+-\\d{2}$"})",
       {R"("ab-12")", R"("z-00")", R"("\u0061-12")"},
       {R"("Ab-12")", R"("ab-1")", R"("ab-123")", R"("-12")", R"("ab\n-12")"}},
      {R"({"type": "string", "pattern": "b+"})",
       {R"("abba")", R"("b")", R"("x\"b\\")"},
       {R"("a")", R"("")", R"("\"")"}},
      {R"({"type": "string", "pattern": "^(ab)+$", "minLength": 3, "maxLength": 6})",
       {R"("abab")", R"("ababab")"},
       {R"("ab")", R"("abababab")", R"("aba")"}},
      {R"({"type": "string", "pattern": "^\"[é€]\\\\$"})",
       {R"("\"é\\")", R"("\"\u20ac\\")"},
       {R"("\"e\\")", R"("é\\")"}},
      {R"({"description": "wrapped", "allOf": [{"type": "string", "maxLength": 1}]})", {R"("a")"}, {R"("ab")", "1"}},
      // allOf merged into one schema: each part's keywords, the tighter bound, joined properties and required.
      {R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", {R"("abc")", R"("")"}, {R"("abcd")", "1"}},
      {R"({"allOf": [{"type": "string"}], "maxLength": 3, "minLength": 1})", {R"("abc")"}, {R"("abcd")", R"("")"}},
      {R"({"$defs": {"Base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}, "allOf": [{"$ref": "#/$defs/Base"}, {"properties": {"name": {"type": "string"}}, "required": ["name"]}]})",
       {R"({"id":1,"name":"x"})", R"({"id":-2,"name":""})"},
       {R"({"id":1})", R"({"name":"x"})", R"({"id":"1","name":"x"})"}},
      {R"({"allOf": [{"type": "integer", "minimum": 3}, {"maximum": 5}, {"type": "number", "minimum": 4}]})",
       {"4", "5"},
       {"3", "6", "4.5"}},
      {R"({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"properties": {"a": {"minimum": 10}}}]})",
       {R"({"a":10})", R"({"a":12})"},
       {R"({"a":9})", R"({"a":10.5})", "{}"}},
      {R"({"allOf": [{"enum": ["a", "b", "c"]}, {"enum": ["c", "b", "d"]}]})",
       {R"("b")", R"("c")"},
       {R"("a")", R"("d")"}},
      {R"({"allOf": [{"type": "array", "items": {"type": "integer"}}, {"items": {"maximum": 2}, "maxItems": 2}]})",
       {"[1,2]", "[]"},
       {"[3]", "[1,2,1]", "[1.5]"}},
      // Keywords beside a $ref apply as well; one the target repeats keeps a recursive schema a reference.
      {R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/node", "type": "object"}}, "required": ["v"]}}, "$ref": "#/$defs/node"})",
       {R"({"v":1})", R"({"v":1,"next":{"v":2,"next":{"v":3}}})"},
       {R"({"v":1,"next":{}})", R"({"next":{"v":2}})"}},
      {R"({"$defs": {"S": {"type": "string"}}, "type": "object", "properties": {"x": {"$ref": "#/$defs/S", "maxLength": 2, "description": "short"}}, "required": ["x"]})",
       {R"({"x":"ab"})"},
       {R"({"x":"abc"})", R"({"x":1})"}},
      {R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false, "minItems": 1})",
       {"[1]", R"([1,"a"])"},
       {"[]", R"(["a"])", R"([1,2])", R"([1,"a",3])"}},
      {R"({"type": "array", "items": [{"const": true}], "additionalItems": {"type": "null"}})",
       {"[]", "[true]", "[true,null,null]"},
       {"[null]", "[true,true]"}},
      {R"({"type": "array", "prefixItems": [{"type": "integer"}]})", {R"([1,"x",{}])"}, {R"(["x"])"}},
      {R"({"type": "object", "properties": {"a": {}, "b": {}, "c": {"type": "integer"}}, "required": ["c"], "minProperties": 2, "maxProperties": 2})",
       {R"({"a":1,"c":2})", R"({"b":1,"c":2})"},
       {R"({"c":2})", R"({"a":1,"b":2,"c":3})"}},
      {R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1, "maxProperties": 2})",
       {R"({"a":1})", R"({"a":1,"b":2})"},
       {"{}", R"({"a":1,"b":2,"c":3})"}},
      // Branches that start alike are read side by side until the text tells them apart.
      {R"({"anyOf": [{"type": "string", "maxLength": 2}, {"enum": ["abc", 7]}, {"type": "integer", "minimum": 100}, {"type": "number", "maximum": 0}]})",
       {R"("ab")", R"("abc")", "7", "100", "-1.5", "0"},
       {R"("abcd")", "8", "0.5", "99"}},
      {R"({"oneOf": [{"$ref": "#/$defs/circle"}, {"$ref": "#/$defs/square"}], "$defs": {"circle": {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]}, "square": {"type": "object", "properties": {"kind": {"enum": ["square", "box"]}, "side": {"type": "number"}}, "required": ["kind", "side"]}}})",
       {R"({"kind":"circle","r":1})", R"({"kind":"box","side":2.5})"},
       {R"({"kind":"circle","side":2})", R"({"kind":"square","r":1})", "{}"}},
      {R"({"type": "array", "items": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "string"}, {"const": "x"}]}})",
       {"[" + std::string(R"("abcd","x",)") +
        R"("yy","x","abcdef","x","q","r","s","t","u","v","w","x","y","z","a","b","c"])"},
       {R"(["a",1])"}},
  };
  for (const Case& c : cases) {
    const auto g = json_schema_grammar(json::parse(c.schema));
    for (const std::string& t : c.good) EXPECT_TRUE(accepts(g, t)) << c.schema << "\n  " << t;
    for (const std::string& t : c.bad) EXPECT_FALSE(accepts(g, t)) << c.schema << "\n  " << t;
  }
  const auto object = json_object_grammar();
  EXPECT_TRUE(accepts(object, R"({"a": [1, 2.5, "x", {"b": null}], "c": false})"));
  EXPECT_FALSE(accepts(object, "[1]"));
  EXPECT_FALSE(accepts(object, R"("text")"));
  EXPECT_FALSE(accepts(object, R"({"a": 1)"));
  EXPECT_FALSE(accepts(object, "{" + std::string(17, ' ') + "}"));  // whitespace is bounded
}

TEST(JsonGrammar, RegexMatchesTheWholeText) {
  const auto g = regex_grammar("(yes|no)!?|\\d{1,3}");
  for (const std::string t : {"yes", "no!", "7", "123"}) EXPECT_TRUE(accepts(g, t)) << t;
  for (const std::string t : {"", "ye", "yes!!", "1234", "no ", " 7"}) EXPECT_FALSE(accepts(g, t)) << t;
  const auto lines = regex_grammar("[^\\n]*\\n[\"\\\\]\\t");  // raw text: quotes, backslashes and controls as they are
  EXPECT_TRUE(accepts(lines, "a\"b\n\\\t"));
  EXPECT_FALSE(accepts(lines, "a\n\n\"\t"));
  EXPECT_THROW(regex_grammar("(a"), Error);
  // Free text up to "<=": the mask's shortcut for states that stay put on most bytes agrees with a full check.
  const auto until = regex_grammar("[^<]*<=!");
  const GrammarTokenTable& table = gpt2_table();
  for (const std::string prefix : {"", "some text ", "x <"}) {
    GrammarMatcher m(until, table);
    for (unsigned char c : prefix) ASSERT_TRUE(m.accept(byte_tokens()[c])) << prefix;
    const std::vector<float> logits = checked_mask(m, prefix);
    int refused_with_lt = 0;
    for (int32_t id = 0; id < table.size(); ++id)
      refused_with_lt += std::isinf(logits[static_cast<size_t>(id)]) && table.bytes(id).find('<') != std::string::npos;
    EXPECT_GT(refused_with_lt, 10) << prefix;
  }
}

TEST(JsonGrammar, TextChoices) {
  const auto g = text_choice_grammar({"yes", "no", "yes!", "maybe \"so\""});
  for (const std::string t : {"yes", "no", "yes!", "maybe \"so\""}) EXPECT_TRUE(accepts(g, t)) << t;
  for (const std::string t : {"ye", "yes!!", "No", "", "\"yes\""}) EXPECT_FALSE(accepts(g, t)) << t;
  EXPECT_THROW(text_choice_grammar({}), Error);
  EXPECT_THROW(text_choice_grammar({"a", ""}), Error);
}

TEST(JsonGrammar, RefusesWhatItCannotEnforceByName) {
  const std::vector<std::pair<const char*, const char*>> refused = {
      {R"~({"type": "string", "pattern": "^(?=a)"})~", "lookaround"},
      {R"({"type": "integer", "minimum": 1, "maximum": 2, "multipleOf": 3})", "multipleOf leave no integer"},
      {R"({"type": "number", "minimum": 0.1, "maximum": 0.2, "multipleOf": 0.25})", "multipleOf leave no number"},
      {R"({"type": "integer", "multipleOf": 0})", "greater than 0"},
      {R"({"type": "integer", "multipleOf": -2})", "greater than 0"},
      {R"({"type": "integer", "multipleOf": "2"})", "must be a number"},
      {R"({"type": "integer", "not": {"const": 1}})", "'not'"},
      {R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true})", "uniqueItems"},
      {R"({"uniqueItems": true})", "uniqueItems"},
      {R"({"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": true, "minItems": 3})", "distinct values"},
      {R"({"type": "array", "prefixItems": [{"const": 1}], "items": {"enum": [2]}, "uniqueItems": true})",
       "uniqueItems"},
      {R"({"type": "integer", "minimum": 3, "maximum": 2})", "no integer"},
      {R"({"type": "integer", "minimum": 2.2, "maximum": 2.8})", "no integer"},
      {R"({"type": "number", "minimum": 1e30})", "no number"},
      {R"({"type": "number", "exclusiveMinimum": true})", "draft 4"},
      {R"({"type": "string", "pattern": "a", "minLength": 2000})", "minLength"},
      {R"({"allOf": [{"type": "string"}, {"type": "integer"}]})", "no value in common"},
      {R"({"allOf": [{"enum": [1, 2]}, {"enum": [3]}]})", "no value in common"},
      {R"({"allOf": [{"const": 1}, {"enum": [3]}]})", "no value in common"},
      {R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})", "'pattern'"},
      {R"({"allOf": [{"anyOf": [{"type": "string"}, {"type": "null"}]}, {"maxLength": 3}]})", "anyOf"},
      {R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false}, {"properties": {"b": {}}}]})",
       "additionalProperties false"},
      {R"({"allOf": [false]})", "false"},
      {R"({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}, {"$ref": "#/$defs/b"}]}, "b": {"allOf": [{"$ref": "#/$defs/c"}, {"$ref": "#/$defs/c"}]}, "c": {"allOf": [{"$ref": "#/$defs/d"}, {"$ref": "#/$defs/d"}]}, "d": {"allOf": [{"$ref": "#/$defs/e"}, {"$ref": "#/$defs/e"}]}, "e": {"allOf": [{"$ref": "#/$defs/f"}, {"$ref": "#/$defs/f"}]}, "f": {"allOf": [{"$ref": "#/$defs/g"}, {"$ref": "#/$defs/g"}]}, "g": {"allOf": [{"$ref": "#/$defs/h"}, {"$ref": "#/$defs/h"}]}, "h": {"allOf": [{"$ref": "#/$defs/i"}, {"$ref": "#/$defs/i"}]}, "i": {"type": "string"}}, "$ref": "#/$defs/a"})",
       "more than 256"},
      {R"({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}, {"type": "string"}]}}, "$ref": "#/$defs/a"})", "deeper"},
      {R"({"allOf": [{"$ref": "#/$defs/nowhere"}]})", "nowhere"},
      {R"({"oneOf": [{"type": "string"}, {"enum": ["a"]}]})", "oneOf"},
      {R"({"anyOf": [{"$ref": "#"}, {"type": "string"}]})", "itself"},
      {R"({"$ref": "#"})", "itself"},
      {R"({"$defs": {"a": {"anyOf": [{"type": "integer"}, {"type": "number"}, {"type": "integer"}, {"type": "number"}, {"type": "integer"}, {"type": "number"}, {"type": "integer"}, {"type": "number"}]}, "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/b"})",
       "ways at once"},
      {R"({"oneOf": [{"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]}, {"type": "object", "properties": {"k": {"enum": [2, 1]}}, "required": ["k"]}]})",
       "oneOf"},
      {R"({"type": "object", "required": ["x"]})", "'x'"},
      {R"({"$ref": "#/$defs/missing"})", "missing"},
      {R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2})", "minProperties"},
      {R"({"type": "object", "properties": {"a": {}}, "minProperties": 2})", "minProperties"},
      {R"({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a", "b"], "maxProperties": 1})",
       "maxProperties"},
      {R"({"type": "array", "prefixItems": [{}], "items": false, "minItems": 2})", "minItems"},
      {R"({"type": "color"})", "color"},
      {"false", "false"},
      {R"({"type": "array", "uniqueItems": true})", "uniqueItems"},
  };
  for (const auto& [schema, word] : refused) {
    try {
      json_schema_grammar(json::parse(schema));
      ADD_FAILURE() << "accepted " << schema;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << schema << ": " << e.what();
    }
  }
  json deep = json::object();
  for (int i = 0; i < 100; ++i) deep = json{{"type", "array"}, {"items", deep}};
  EXPECT_THROW(json_schema_grammar(deep), Error);
  // $refs that share nodes: each level's two branches (a union around the next level, and the next level)
  // lead to the same next level, 2^18 ways in all: refused, and at once.
  json defs = json::object();
  for (int i = 0; i < 18; ++i) {
    const json next = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
    defs["d" + std::to_string(i)] = {{"anyOf", json::array({json{{"anyOf", json::array({next})}}, next})}};
  }
  defs["d18"] = {{"type", "integer"}};
  try {
    json_schema_grammar(json{{"$defs", defs}, {"$ref", "#/$defs/d0"}});
    ADD_FAILURE() << "accepted 2^18 readings";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ways at once"), std::string::npos) << e.what();
  }
}

// The JSON Schema test suite's draft 7 files: each schema the compiler takes accepts no instance the suite
// calls invalid. Valid instances it may refuse (properties in another order than the schema's, extra
// properties, 1.0 for an integer): a constrained reply is one valid text, not every one.
TEST(JsonGrammar, NeverAcceptsWhatTheJsonSchemaTestSuiteCallsInvalid) {
  int schemas = 0, compiled = 0, invalid_rejected = 0, valid_accepted = 0;
  for (const auto& entry : std::filesystem::directory_iterator(KVSERVE_JSON_SCHEMA_SUITE)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    for (const json& group : json::parse(ss.str())) {
      ++schemas;
      std::shared_ptr<const Grammar> g;
      try {
        g = json_schema_grammar(group.at("schema"));
      } catch (const Error&) {
        continue;
      }
      ++compiled;
      for (const json& test : group.at("tests")) {
        std::string text;
        try {
          text = test.at("data").dump();
        } catch (const json::exception&) {
          continue;  // invalid UTF-8 in the data
        }
        const bool accepted = accepts(g, text);
        if (!test.at("valid").get<bool>()) {
          EXPECT_FALSE(accepted) << entry.path().filename() << ": " << group.at("description") << " / "
                                 << test.at("description") << "\n  schema " << group.at("schema").dump() << "\n  data "
                                 << text;
          ++invalid_rejected;
        } else if (accepted) {
          ++valid_accepted;
        }
      }
    }
  }
  EXPECT_GE(schemas, 120);
  EXPECT_GE(compiled, 55);
  EXPECT_GE(invalid_rejected, 93);
  EXPECT_GE(valid_accepted, 86);
}

// The suite's optional format tests, for the formats written to their definition: no instance it calls
// invalid is accepted, and the valid ones in the forms the patterns write (upper-case T and Z) are.
TEST(JsonGrammar, FormatsNeverAcceptWhatTheSuiteCallsInvalid) {
  int invalid_rejected = 0, valid_accepted = 0;
  for (const char* format : {"date", "time", "date-time", "email", "ipv4", "hostname"}) {
    std::ifstream in(std::string(KVSERVE_JSON_SCHEMA_SUITE) + "/optional/format/" + format + ".json");
    ASSERT_TRUE(in) << format;
    std::stringstream ss;
    ss << in.rdbuf();
    for (const json& group : json::parse(ss.str())) {
      const auto g = json_schema_grammar(json{{"type", "string"}, {"format", format}});
      for (const json& test : group.at("tests")) {
        if (!test.at("data").is_string()) continue;
        const std::string text = test.at("data").dump();
        const bool accepted = accepts(g, text);
        if (!test.at("valid").get<bool>()) {
          EXPECT_FALSE(accepted) << format << ": " << text;
          ++invalid_rejected;
        } else if (text.find_first_of("tz") == std::string::npos || std::string(format) == "email" ||
                   std::string(format) == "hostname") {
          EXPECT_TRUE(accepted) << format << ": " << text;
          valid_accepted += accepted;
        }
      }
    }
  }
  EXPECT_GE(invalid_rejected, 15);
  EXPECT_GE(valid_accepted, 10);
  const auto uuid = json_schema_grammar(json::parse(R"({"type": "string", "format": "uuid"})"));
  EXPECT_TRUE(accepts(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(accepts(uuid, R"("123e4567-e89b-12d3-a456-42661417400")"));
  const auto date = json_schema_grammar(json::parse(R"({"type": "string", "format": "date"})"));
  for (const char* bad : {R"("2024-02-30")", R"("2024-04-31")", R"("2024-13-01")", R"("2024-1-01")"})
    EXPECT_FALSE(accepts(date, bad)) << bad;
  // A format beside a pattern is an annotation; an unknown one too.
  EXPECT_TRUE(accepts(json_schema_grammar(json::parse(R"({"type": "string", "format": "date", "pattern": "^x"})")),
                      R"("xyz")"));
  EXPECT_TRUE(accepts(json_schema_grammar(json::parse(R"({"type": "string", "format": "color"})")), R"("red")"));
}

bool valid_by_valijson(const json& schema, const std::string& text) {
  valijson::Schema parsed;
  valijson::SchemaParser parser;
  const nlohmann::json schema_doc = nlohmann::json::parse(schema.dump());
  valijson::adapters::NlohmannJsonAdapter schema_adapter(schema_doc);
  parser.populateSchema(schema_adapter, parsed);
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return false;
  valijson::Validator validator(valijson::Validator::kStrongTypes);
  valijson::adapters::NlohmannJsonAdapter doc_adapter(doc);
  return validator.validate(parsed, doc_adapter, nullptr);
}

// A reply drawn at random through GPT-2's vocabulary among the tokens each step's mask allows (after
// `patient` steps, ones that close something, so the walk ends); `check` sees the matcher and its mask at
// each step. whole: the reply may end where the walk stopped.
struct RandomReply {
  std::string text;
  bool whole = false;
};
using StepCheck = std::function<void(const GrammarMatcher&, const std::vector<float>& logits, int step)>;
RandomReply random_reply(const std::shared_ptr<const Grammar>& g, std::mt19937& rng, int max_steps, int patient,
                         const StepCheck& check = {}, const GrammarTokenTable& table = gpt2_table(),
                         const std::function<bool(const std::string&)>& closing_text = {}) {
  GrammarMatcher m(g, table);
  RandomReply r;
  std::vector<float> logits(static_cast<size_t>(table.size()));
  // The tokens that tend to close what is open: preferred once the reply has run `patient` steps.
  static std::vector<uint8_t> gpt2_closes;
  std::vector<uint8_t> own_closes;
  std::vector<uint8_t>& closes = closing_text ? own_closes : gpt2_closes;
  if (closes.empty()) {
    closes.resize(static_cast<size_t>(table.size()));
    for (int32_t id = 0; id < table.size(); ++id)
      closes[static_cast<size_t>(id)] =
          table.end_of_generation(id) ||
          (closing_text ? closing_text(table.bytes(id)) : table.bytes(id).find_first_of("\"]}>") != std::string::npos);
  }
  for (int step = 0; step < max_steps && !m.done(); ++step) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    const int64_t allowed = m.mask(logits.data(), table.size());
    std::vector<int32_t> ids, closing;
    for (int32_t id = 0; id < table.size(); ++id) {
      if (std::isinf(logits[static_cast<size_t>(id)])) continue;
      ids.push_back(id);
      if (closes[static_cast<size_t>(id)]) closing.push_back(id);
    }
    EXPECT_EQ(static_cast<int64_t>(ids.size()), allowed);
    if (ids.empty()) {
      ADD_FAILURE() << "no token may follow " << json(r.text).dump();
      return r;
    }
    if (check) check(m, logits, step);
    const std::vector<int32_t>& pool = step > patient && !closing.empty() ? closing : ids;
    const int32_t id = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    if (table.end_of_generation(id)) break;
    if (!m.accept(id)) {
      ADD_FAILURE() << "the mask allowed a token accept refuses after " << json(r.text).dump();
      return r;
    }
    r.text += table.bytes(id);
  }
  r.whole = m.can_end();
  return r;
}

// Random replies are valid for their schema, by valijson. At a few points on the way, every token the mask
// allows is accepted and every one it refuses is refused by a full check.
TEST(GrammarMatcher, RandomRepliesThroughARealVocabularyAreValid) {
  const std::vector<const char*> schemas = {
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}, "ok": {"type": "boolean"}}, "required": ["name", "age", "tags", "ok"]})",
      R"({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 4})",
      R"({"type": "object", "properties": {"answer": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "score": {"type": "number"}}, "required": ["answer"]})",
      R"({"type": "object", "additionalProperties": {"type": "integer"}})",
      R"({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,5}$"}, "n": {"type": "integer", "minimum": -20, "exclusiveMaximum": 1000}, "p": {"type": "number", "minimum": 0.5, "maximum": 2.75}, "word": {"type": "string", "pattern": "é|[xyz]{2}", "minLength": 3, "maxLength": 9}}, "required": ["id", "n", "p", "word"]})",
      R"({"type": "array", "items": {"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"type": "object", "properties": {"b": {"type": "string", "maxLength": 4}}, "required": ["b"]}, {"type": "integer", "maximum": 50}, {"type": "number", "minimum": 0}]}, "maxItems": 4})",
      R"({"type": "array", "items": [{"type": "integer"}, {"type": "string", "maxLength": 3}], "additionalItems": {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "integer"}}, "minProperties": 1, "maxProperties": 2}, "maxItems": 4})",
      R"({"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b", "c", 1, true, {"x": [1]}]}, "uniqueItems": true}, "flags": {"type": "array", "items": {"type": "boolean"}, "uniqueItems": true, "minItems": 1}}, "required": ["tags", "flags"]})",
      R"({"type": "object", "properties": {"k": {"type": "integer", "multipleOf": 7, "minimum": -50, "maximum": 500}, "q": {"type": "number", "multipleOf": 0.25, "exclusiveMinimum": -3, "maximum": 40}, "big": {"type": "integer", "multipleOf": 1000}}, "required": ["k", "q", "big"]})",
      R"({"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date", "maxLength": 10}, "host": {"type": "string", "format": "hostname"}}, "required": ["when", "day", "host"]})",
  };
  std::mt19937 rng(5);
  int complete = 0, checked_masks = 0;
  for (const char* text : schemas) {
    const json schema = json::parse(text);
    const auto g = json_schema_grammar(schema);
    for (int walk = 0; walk < 8; ++walk) {
      const StepCheck full_check = [&](const GrammarMatcher& m, const std::vector<float>& logits, int step) {
        if (walk != 0 || step % 7 != 3) return;
        expect_mask_is_exact(m, logits, text);
        ++checked_masks;
      };
      const RandomReply r = random_reply(g, rng, 200, 30, full_check);
      if (!r.whole) continue;
      ++complete;
      EXPECT_TRUE(valid_by_valijson(schema, r.text)) << text << "\n  " << json(r.text).dump();
    }
  }
  EXPECT_GE(complete, 24);
  EXPECT_GE(checked_masks, 4);
}

// Where a union's branches start alike the text is read several ways at once: at such points too, the mask
// allows exactly the tokens a full check allows, and accepting one keeps only the readings that took it.
TEST(GrammarMatcher, MasksFollowEveryReadingOfAmbiguousText) {
  const auto g = json_schema_grammar(json::parse(
      R"({"type": "array", "items": {"oneOf": [{"$ref": "#/$defs/c"}, {"$ref": "#/$defs/s"}, {"type": "string", "pattern": "^\\d+$"}]}, "$defs": {"c": {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "integer", "maximum": 9}}, "required": ["kind", "r"]}, "s": {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}}, "required": ["kind"]}}})"));
  // Here a token's own bytes tell the branches apart ("12" only the second can start).
  const auto numbers = json_schema_grammar(json::parse(
      R"({"type": "array", "items": {"anyOf": [{"type": "integer", "maximum": 5}, {"type": "integer", "minimum": 100}]}})"));
  // multipleOf with bounds: a prefix is refused where no multiple within them starts with it.
  const auto stepped = json_schema_grammar(json::parse(
      R"({"type": "array", "items": {"type": "number", "multipleOf": 0.75, "minimum": -2, "maximum": 8}})"));
  // Unique items from a list: an item may not be one written already, and the list may not go on once all are.
  const auto unique = json_schema_grammar(
      json::parse(R"({"type": "array", "items": {"enum": ["a", "ab", "b"]}, "uniqueItems": true})"));
  const GrammarTokenTable& table = gpt2_table();
  int checked = 0;
  const std::vector<std::pair<std::shared_ptr<const Grammar>, std::string>> points = {
      {g, "["},
      {g, "[{"},
      {g, "[{\"kind\""},
      {g, "[{\"kind\": \""},
      {g, "[{\"kind\": \"s"},
      {g, "[{\"kind\": \"circle\", \"r\": "},
      {g, "[{\"kind\": \"square\""},
      {g, "[{\"kind\": \"square\"}, \"12"},
      {numbers, "["},
      {numbers, "[3, "},
      {numbers, "[1"},
      {stepped, "["},
      {stepped, "[1"},
      {stepped, "[-"},
      {stepped, "[0."},
      {unique, "[\"a\","},
      {unique, "[\"a\", \"ab\""},
      {unique, "[\"ab\",\"a"},
      {unique, "[\"ab\",\"a\""}};
  for (const auto& [grammar, prefix] : points) {
    GrammarMatcher m(grammar, table);
    for (unsigned char c : prefix) ASSERT_TRUE(m.accept(byte_tokens()[c])) << prefix;
    const std::vector<float> logits = checked_mask(m, prefix);
    EXPECT_TRUE(std::any_of(logits.begin(), logits.end(), [](float x) { return !std::isinf(x); })) << prefix;
    ++checked;
  }
  EXPECT_TRUE(accepts(numbers, "[5, 100, 0, 12345]"));
  EXPECT_FALSE(accepts(numbers, "[6]"));
  EXPECT_FALSE(accepts(numbers, "[99]"));
  EXPECT_EQ(checked, 19);
  {
    GrammarMatcher m(unique, table);
    for (unsigned char c : std::string(R"(["b","ab","a")")) ASSERT_TRUE(m.accept(byte_tokens()[c]));
    EXPECT_FALSE(m.accept(byte_tokens()[','])) << "every value is written";
    EXPECT_TRUE(m.accept(byte_tokens()[']']));
  }
  EXPECT_TRUE(accepts(stepped, "[-1.5, 0, 0.75, 7.5, 6, 2.25]"));
  EXPECT_FALSE(accepts(stepped, "[1]"));
  EXPECT_FALSE(accepts(stepped, "[8]"));
  EXPECT_FALSE(accepts(stepped, "[-2]"));
  {
    GrammarMatcher m(stepped, table);
    ASSERT_TRUE(m.accept(byte_tokens()['[']));
    EXPECT_FALSE(m.accept(byte_tokens()['8'])) << "no multiple of 0.75 in [-2, 8] starts with 8";
  }
  EXPECT_TRUE(accepts(g, R"([{"kind": "circle", "r": 3}, {"kind": "square"}, "42"])"));
  EXPECT_FALSE(accepts(g, R"([{"kind": "circle"}])"));
  EXPECT_FALSE(accepts(g, R"([{"kind": "square", "r": 3}])"));
}

// A string with a pattern, masked at each character on one matcher (whose masks keep what they learn per
// state of the pattern, shared with its copies): each time exactly what a full check allows.
TEST(GrammarMatcher, PatternMasksKeepWhatTheyLearnPerState) {
  const GrammarTokenTable& table = gpt2_table();
  const auto code = json_schema_grammar(json::parse(R"({"type": "string", "pattern": "^[a-z]+-\\d+$"})"));
  GrammarMatcher walk(code, table);
  for (const char c : std::string("\"ab-12")) {
    ASSERT_TRUE(walk.accept(byte_tokens()[static_cast<unsigned char>(c)]));
    for (int twice = 0; twice < 2; ++twice) checked_mask(walk, std::string(1, c));
  }
}

// A reasoning model's <think> block before the structured reply: free text up to </think> (the prompt may
// have opened it), blank lines, then the grammar's text; or no block at all. At points inside and around the
// block the mask allows exactly what a full check of each token allows.
TEST(JsonGrammar, AfterReasoning) {
  const auto object = json_object_grammar();
  const auto model_opens = after_reasoning(object, /*opened=*/false);
  const auto prompt_opened = after_reasoning(object, /*opened=*/true);
  EXPECT_TRUE(accepts(model_opens, "<think>\nx < y, \"so\" {</think>\n\n{\"a\": 1}"));
  EXPECT_TRUE(accepts(model_opens, "{\"a\": 1}"));
  EXPECT_TRUE(accepts(model_opens, "<think></think>{}"));
  EXPECT_FALSE(accepts(model_opens, "<think>plan</think>"));
  EXPECT_FALSE(accepts(model_opens, "<think>plan</think>\n\nAnswer"));
  EXPECT_FALSE(accepts(model_opens, "Sure: {}"));
  EXPECT_TRUE(accepts(prompt_opened, "plan </thinking> </think>\n{}"));
  EXPECT_TRUE(accepts(prompt_opened, "</think>{}"));
  EXPECT_FALSE(accepts(prompt_opened, "{}"));  // still inside the block
  // A hermes tool call starts with '<' too: the bytes after it tell the call from the block.
  const auto call = server::forced_tool_call_grammar(
      server::ToolCallFormat::Hermes, json::parse(R"([{"type": "function", "function": {"name": "f"}}])"), "");
  const std::string hermes = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(accepts(after_reasoning(call, false), hermes));
  EXPECT_TRUE(accepts(after_reasoning(call, false), "<think>x</think>\n" + hermes));
  EXPECT_FALSE(accepts(after_reasoning(call, false), "<think>x</think>\n"));
  EXPECT_TRUE(accepts(after_reasoning(call, true),
                      "ok</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"));
  // gpt-oss: an analysis message, then the next message's header, then the grammar's text.
  const auto harmony = after_reasoning(after_text("<|channel|>final<|message|>", object), false,
                                       "<|channel|>analysis<|message|>", "<|end|>", "<|start|>assistant");
  EXPECT_TRUE(
      accepts(harmony, "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>{}"));
  EXPECT_TRUE(accepts(harmony, "<|channel|>final<|message|>{}"));
  EXPECT_FALSE(accepts(harmony, "<|channel|>analysis<|message|>a<|end|><|channel|>final<|message|>{}"));
  EXPECT_FALSE(accepts(harmony, "{}"));

  const GrammarTokenTable& table = gpt2_table();
  for (const std::string prefix :
       {"", "<think>", "<think>a <", "<think>a </thi", "<think>b</think>", "<think>b</think>\n"}) {
    GrammarMatcher m(model_opens, table);
    for (unsigned char c : prefix) ASSERT_TRUE(m.accept(byte_tokens()[c])) << prefix;
    checked_mask(m, prefix);
  }
}

// tool_choice "required" or a named function: the grammar of one call in each format the server parses.
// Random replies it allows read back, through the format's own parser, as exactly one call of a given tool
// with arguments valid for that tool's schema (valijson); other texts are refused.
TEST(GrammarMatcher, ForcedToolCallsReadBackAsOneValidCall) {
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 10}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {
      "zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}])");
  struct Format {
    server::ToolCallFormat format;
    std::string chat_template;  // Mistral: [ARGS] in the template picks NAME[ARGS]{...}
    std::string good, bad;
  };
  const std::vector<Format> formats = {
      {server::ToolCallFormat::Hermes, "",
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_date\", \"arguments\": {}}\n</tool_call>"},
      {server::ToolCallFormat::Llama3Json, "",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"days\": 2}}",
       "{\"name\": \"get_weather\", \"parameters\": {\"days\": 2}}"},
      {server::ToolCallFormat::Mistral, "[TOOL_CALLS]x[ARGS]", "[TOOL_CALLS]get_time[ARGS]{\"zone\": \"UTC\"}",
       "[TOOL_CALLS]get_time[ARGS]{\"zone\": \"PST\"}"},
      {server::ToolCallFormat::Mistral, "[TOOL_CALLS]",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, {}]"},
      {server::ToolCallFormat::Qwen3Coder, "",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
       "</function>\n</tool_call>",
       "<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>"},
      {server::ToolCallFormat::Qwen3Coder, "",
       "<tool_call>\n<function=get_time>\n<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call>",
       "<tool_call>\n<function=get_time>\n<parameter=zone>\nPST\n</parameter>\n</function>\n</tool_call>"},
      {server::ToolCallFormat::Glm45, "",
       "<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>UTC</arg_value>\n</tool_call>",
       "<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>PST</arg_value>\n</tool_call>"},
      {server::ToolCallFormat::Glm45, "",
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n<arg_key>days</arg_key>\n"
       "<arg_value>3</arg_value>\n</tool_call>",
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome and Milan</arg_value>\n</tool_call>"},
      {server::ToolCallFormat::Harmony, "",
       "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{\"zone\": \"CET\"}",
       "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{\"zone\": \"PST\"}"},
      {server::ToolCallFormat::Pythonic, "", "[get_weather(city=\"Oslo\", days=2)]", "[get_weather(days=2)]"},
      {server::ToolCallFormat::Pythonic, "", "[get_time(zone=\"UTC\")]", "[get_time(zone='UTC')]"},
      {server::ToolCallFormat::Gemma4, "", "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>,days:2}<tool_call|>",
       "<|tool_call>call:get_weather{days:2}<tool_call|>"},
      {server::ToolCallFormat::Gemma4, "", "<|tool_call>call:get_time{zone:<|\"|>CET<|\"|>}<tool_call|>",
       "<|tool_call>call:get_time{zone:<|\"|>PST<|\"|>}<tool_call|>"},
  };
  std::mt19937 rng(9);
  for (const Format& f : formats) {
    const auto g = server::forced_tool_call_grammar(f.format, tools, f.chat_template);
    const std::string name(server::tool_call_format_name(f.format));
    EXPECT_TRUE(accepts(g, f.good)) << name;
    EXPECT_FALSE(accepts(g, f.bad)) << name;
    const auto good = server::parse_tool_calls(f.format, tools, f.good);
    ASSERT_EQ(good.calls.size(), 1u) << name;
    int complete = 0;
    for (int walk = 0; walk < 6; ++walk) {
      const RandomReply r = random_reply(g, rng, 300, 40);
      if (!r.whole) continue;
      ++complete;
      const std::string out = r.text;
      const auto parsed = server::parse_tool_calls(f.format, tools, out);
      ASSERT_EQ(parsed.calls.size(), 1u) << name << ": " << json(out).dump();
      EXPECT_TRUE(parsed.content.empty()) << name << ": " << json(out).dump();
      const json& tool = parsed.calls[0].name == "get_weather" ? tools[0] : tools[1];
      EXPECT_EQ(tool["function"]["name"], parsed.calls[0].name);
      EXPECT_TRUE(valid_by_valijson(tool["function"]["parameters"], parsed.calls[0].arguments))
          << name << ": " << parsed.calls[0].arguments;
    }
    EXPECT_GE(complete, 4) << name;
  }
  // Free text as a string parameter's value, in the XML formats: anything but the tags the parser stops at.
  const json free = json::parse(R"([{"type": "function", "function": {"name": "note", "parameters": {"type": "object",
      "properties": {"text": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["text"]}}}])");
  const auto qwen = server::forced_tool_call_grammar(server::ToolCallFormat::Qwen3Coder, free, "");
  EXPECT_TRUE(accepts(
      qwen, "<tool_call>\n<function=note>\n<parameter=text>\na < b\n\"ok\"\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(
      qwen, "<tool_call>\n<function=note>\n<parameter=text>\na </function>\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(
      qwen, "<tool_call>\n<function=note>\n<parameter=text>\n<parameter=x>\n</parameter>\n</function>\n</tool_call>"));
  for (const auto format : {server::ToolCallFormat::Qwen3Coder, server::ToolCallFormat::Glm45}) {
    const auto g = server::forced_tool_call_grammar(format, free, "");
    int checked = 0;
    for (int walk = 0; walk < 6; ++walk) {
      // At points inside the free text too, the mask allows exactly what a full check allows.
      const StepCheck full_check = [&](const GrammarMatcher& m, const std::vector<float>& logits, int step) {
        if (walk > 1 || step % 4 != 2 || step > 40) return;
        expect_mask_is_exact(m, logits, "free text");
        ++checked;
      };
      const RandomReply r = random_reply(g, rng, 300, 60, full_check);
      if (!r.whole) continue;
      const auto parsed = server::parse_tool_calls(format, free, r.text);
      ASSERT_EQ(parsed.calls.size(), 1u) << json(r.text).dump();
      EXPECT_TRUE(valid_by_valijson(free[0]["function"]["parameters"], parsed.calls[0].arguments))
          << parsed.calls[0].arguments;
    }
    EXPECT_GE(checked, 8);
  }
  const json patterned = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"code": {"type": "string", "pattern": "^a+$"}}}}}])");
  EXPECT_THROW(server::forced_tool_call_grammar(server::ToolCallFormat::Glm45, patterned, ""), Error);
  EXPECT_THROW(server::forced_tool_call_grammar(server::ToolCallFormat::None, tools, ""), Error);
}

// `text` reads back through `format`'s parser as exactly one call of tools[0], nothing else, with arguments its
// schema validates.
void expect_one_valid_call(server::ToolCallFormat format, const json& tools, const std::string& text) {
  const auto parsed = server::parse_tool_calls(format, tools, text);
  ASSERT_EQ(parsed.calls.size(), 1u) << json(text).dump();
  EXPECT_TRUE(parsed.content.empty()) << json(text).dump();
  EXPECT_TRUE(valid_by_valijson(tools[0]["function"]["parameters"], parsed.calls[0].arguments))
      << json(text).dump() << "\n"
      << parsed.calls[0].arguments;
}

// Gemma 4's forced call: the arguments in its notation (strings between <|"|> marks as they are, keys bare),
// following the tool's schema through nested objects, arrays, enums, bounds, optional and nullable properties,
// anyOf and a recursive $ref. Random replies read back through the gemma4 parser as one call whose arguments
// the schema validates; replies off the schema are refused; what the notation cannot say is refused by name.
TEST(GrammarMatcher, Gemma4ForcedCallsFollowTheSchema) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "plan", "parameters": {
    "type": "object",
    "properties": {
      "title": {"type": "string", "description": "free text"},
      "code": {"type": "string", "minLength": 2, "maxLength": 5},
      "when": {"type": "string", "format": "date"},
      "mode": {"enum": ["fast", "slow", 3, null]},
      "steps": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "weight": {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.125},
        "done": {"type": "boolean"}}, "required": ["name", "done"]}, "minItems": 1},
      "note": {"type": ["string", "null"]},
      "a:b": {"type": "integer", "minimum": -3, "maximum": 3},
      "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
      "any": {},
      "either": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"}}]},
      "tree": {"$ref": "#/$defs/node"}
    },
    "required": ["title", "steps"],
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}}}}])");
  const auto g = server::forced_tool_call_grammar(server::ToolCallFormat::Gemma4, tools, "");
  const std::string q = "<|\"|>";
  const auto call = [&](const std::string& args) { return "<|tool_call>call:plan{" + args + "}<tool_call|>"; };
  const std::vector<std::string> good = {
      "title:" + q + "a < b, {x}: \"y\"" + q + ",steps:[{name:" + q + q + ",done:true}]",
      "title:" + q + "t" + q + ",code:" + q + "ab" + q + ",when:" + q + "2026-12-07" + q + ",mode:" + q + "slow" + q +
          ",steps:[{name:" + q + "n" + q + ",weight:0.5,done:false},{name:" + q + "m" + q + ",done:true}],note:null," +
          q + "a:b" + q + ":-3,extra:{k:1,k_2:-4},any:[" + q + "x" + q + ",{y:null}],either:[" + q + "s" + q +
          "],tree:{v:1,kids:[{v:2,kids:[]}]}",
      "title:" + q + "t" + q + ",steps:[{name:" + q + "n" + q + ",done:true}],mode:3",  // out of order
  };
  EXPECT_TRUE(accepts(g, call(good[0])));
  EXPECT_TRUE(accepts(g, call(good[1])));
  EXPECT_FALSE(accepts(g, call(good[2])));
  const std::vector<std::string> bad = {
      "steps:[{name:" + q + "n" + q + ",done:true}]",                                       // title missing
      "title:" + q + "t" + q + ",steps:[]",                                                 // minItems 1
      "title:" + q + "t" + q + ",steps:[{name:" + q + "n" + q + "}]",                       // done missing
      "title:\"t\",steps:[{name:" + q + "n" + q + ",done:true}]",                           // JSON's string
      "title:" + q + "t" + q + ", steps:[{name:" + q + "n" + q + ",done:true}]",            // a space
      "title:" + q + "t" + q + ",code:" + q + "abcdef" + q + ",steps:[]",                   // too long
      "title:" + q + "t" + q + ",steps:[{name:" + q + "n" + q + ",weight:2,done:true}]",    // above maximum
      "title:" + q + "t" + q + ",steps:[{name:" + q + "n" + q + ",weight:0.3,done:true}]",  // not a multiple
      "title:" + q + "t" + q + ",steps:[{name:" + q + "n" + q + ",done:true}],mode:" + q + "medium" + q,
      "title:" + q + "t" + q + ",steps:[{name:" + q + "n" + q + ",done:true}],tree:{kids:[]}",
      "title:" + q + "t<tool_call|>" + q + ",steps:[{name:" + q + "n" + q + ",done:true}]",  // ends the block
  };
  for (const std::string& b : bad) EXPECT_FALSE(accepts(g, call(b))) << b;
  for (const std::string& t : {good[0], good[1]}) expect_one_valid_call(server::ToolCallFormat::Gemma4, tools, call(t));
  // Walked through Gemma 4's own vocabulary, where <|"|> and the call's markers are tokens of their own.
  const std::string vocab = model_cache_dir() + "/llama.cpp-vocab-0.3.36/ggml-vocab-gemma-4.gguf";
  ASSERT_TRUE(std::filesystem::exists(vocab)) << vocab << " (run scripts/fetch_llama_cpp_vocab.sh)";
  const std::unique_ptr<Tokenizer> gemma4 = Tokenizer::create(load_gguf_vocab(vocab));
  const GrammarTokenTable gemma4_table(*gemma4);
  for (const std::string marker : {"<|tool_call>", "<tool_call|>", "<|\"|>"})
    EXPECT_EQ(gemma4->encode(marker, false, true).size(), 1u) << marker;
  // Past its patience a walk prefers the tokens that end strings, calls, objects and arrays.
  const auto closing = [&](const std::string& b) {
    return b == q || b == "<tool_call|>" || (!b.empty() && b.find_first_not_of("]},") == std::string::npos);
  };
  std::mt19937 rng(4);
  int complete = 0, checked = 0;
  for (int walk = 0; walk < 12; ++walk) {
    const StepCheck full_check = [&](const GrammarMatcher& m, const std::vector<float>& logits, int step) {
      if (walk > 1 || step % 7 != 3 || step > 60) return;
      expect_mask_is_exact(m, logits, "gemma4");
      ++checked;
    };
    const RandomReply r = random_reply(g, rng, 400, 60, full_check, gemma4_table, closing);
    if (!r.whole) continue;
    ++complete;
    expect_one_valid_call(server::ToolCallFormat::Gemma4, tools, r.text);
  }
  EXPECT_GE(complete, 6);
  EXPECT_GE(checked, 8);
  // A tool without parameters takes any arguments; two tools are told apart by name.
  const json two = json::parse(R"([{"type": "function", "function": {"name": "get"}},
    {"type": "function", "function": {"name": "get_all", "parameters": {"type": "object", "properties": {},
     "additionalProperties": false}}}])");
  const auto g2 = server::forced_tool_call_grammar(server::ToolCallFormat::Gemma4, two, "");
  EXPECT_TRUE(accepts(g2, "<|tool_call>call:get{x:[1,true," + q + "s" + q + "],y:{}}<tool_call|>"));
  EXPECT_TRUE(accepts(g2, "<|tool_call>call:get_all{}<tool_call|>"));
  EXPECT_FALSE(accepts(g2, "<|tool_call>call:get_all{x:1}<tool_call|>"));
  EXPECT_FALSE(accepts(g2, "<|tool_call>call:get_some{}<tool_call|>"));
  // After Gemma 4's thought channel, when the reasoning split is on.
  const auto thinking = after_reasoning(g2, false, "<|channel>thought", "<channel|>");
  EXPECT_TRUE(accepts(thinking, "<|channel>thought\nplan: call <it><channel|><|tool_call>call:get_all{}<tool_call|>"));
  EXPECT_TRUE(accepts(thinking, "<|tool_call>call:get_all{}<tool_call|>"));
  EXPECT_FALSE(accepts(thinking, "<|channel>thought\nplan<channel|>Sure."));
  // What the notation or the matcher cannot enforce is refused by name.
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"type": "object", "properties": {"c": {"type": "string", "pattern": "^a+$"}}})", "pattern"},
      {R"({"type": "object", "properties": {"c": {"type": "array", "minItems": 2}}})", "minItems"},
      {R"({"type": "object", "properties": {"c": {"type": "array", "maxItems": 2}}})", "maxItems"},
      {R"({"type": "object", "minProperties": 1})", "minProperties"},
      {R"({"type": "object", "properties": {"x<|\"|>": {}}})", "cannot be written"},
      {R"({"type": "object", "properties": {"x": {"const": "a<tool_call|>"}}})", "cannot be written"},
      {R"({"type": "array"})", "of type object"},
  };
  for (const auto& [schema, needle] : refused) {
    const json t =
        json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::parse(schema)}}}}});
    try {
      server::forced_tool_call_grammar(server::ToolCallFormat::Gemma4, t, "");
      ADD_FAILURE() << "accepted " << schema;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

// The pythonic forced call: [NAME(key=VALUE, ...)] with Python literals (True / False / None, double-quoted
// strings with escapes, lists, dicts with string keys), following the schema; random replies read back through
// the pythonic parser as one call the schema validates.
TEST(GrammarMatcher, PythonicForcedCallsFollowTheSchema) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "plan", "parameters": {
    "type": "object",
    "properties": {
      "title": {"type": "string"},
      "code": {"type": "string", "minLength": 2, "maxLength": 5},
      "mode": {"enum": ["fast", "it's \"slow\"", 3, null, true]},
      "steps": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "weight": {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.125},
        "done": {"type": "boolean"}}, "required": ["name", "done"]}, "minItems": 1},
      "note": {"type": ["string", "null"]},
      "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
      "any": {},
      "tree": {"$ref": "#/$defs/node"}
    },
    "required": ["title", "steps"],
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}}}}])");
  const auto g = server::forced_tool_call_grammar(server::ToolCallFormat::Pythonic, tools, "");
  const auto call = [](const std::string& args) { return "[plan(" + args + ")]"; };
  const std::string good[] = {
      R"(title="a \"b\"\n", steps=[{"name": "", "done": True}])",
      R"(title="t", code="ab", mode="it's \"slow\"", steps=[{"name": "n", "weight": 0.5, "done": False}], note=None, )"
      R"(extra={"k": 1, "k 2": -4}, any=["x", {"y": None}, 1.5], tree={"v": 1, "kids": [{"v": 2, "kids": []}]})",
  };
  for (const std::string& t : good) {
    EXPECT_TRUE(accepts(g, call(t))) << t;
    expect_one_valid_call(server::ToolCallFormat::Pythonic, tools, call(t));
  }
  const std::vector<std::string> bad = {
      R"(steps=[{"name": "n", "done": True}])",                            // title missing
      R"(title="t", steps=[])",                                            // minItems 1
      R"(title='t', steps=[{"name": "n", "done": True}])",                 // single quotes: not written
      R"(title="t", steps=[{"name": "n", "done": true}])",                 // JSON's true
      R"(title="t",steps=[{"name": "n", "done": True}])",                  // no space
      R"(title="t", steps=[{"name": "n", "done": True}], mode="medium")",  // not in the enum
      R"(title="t", steps=[{"name": "n", "weight": 2, "done": True}])",    // above maximum
      R"(title="t", steps=[{"name": "n", "weight": 0.3, "done": True}])",  // not a multiple of 0.125
      R"(title="t", code="abcdef", steps=[{"name": "n", "done": True}])",  // too long
  };
  for (const std::string& b : bad) EXPECT_FALSE(accepts(g, call(b))) << b;
  std::mt19937 rng(6);
  int complete = 0;
  for (int walk = 0; walk < 12; ++walk) {
    const RandomReply r = random_reply(g, rng, 400, 60);
    if (!r.whole) continue;
    ++complete;
    expect_one_valid_call(server::ToolCallFormat::Pythonic, tools, r.text);
  }
  EXPECT_GE(complete, 6);
  // A tool without parameters takes any keyword arguments; names Python cannot call are refused.
  const json free = json::parse(R"([{"type": "function", "function": {"name": "get"}}])");
  const auto g2 = server::forced_tool_call_grammar(server::ToolCallFormat::Pythonic, free, "");
  EXPECT_TRUE(accepts(g2, R"([get(x=[1, True, "s"], y={})])"));
  EXPECT_TRUE(accepts(g2, "[get()]"));
  EXPECT_FALSE(accepts(g2, "[get(1)]"));
  for (const char* schema : {R"({"type": "object", "properties": {"a-b": {}}})",
                             R"({"type": "object", "properties": {"c": {"type": "string", "pattern": "^a$"}}})"}) {
    const json t =
        json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::parse(schema)}}}}});
    EXPECT_THROW(server::forced_tool_call_grammar(server::ToolCallFormat::Pythonic, t, ""), Error) << schema;
  }
  const json dashed = json::parse(R"([{"type": "function", "function": {"name": "get-it"}}])");
  EXPECT_THROW(server::forced_tool_call_grammar(server::ToolCallFormat::Pythonic, dashed, ""), Error);
}

}  // namespace
}  // namespace kvserve
