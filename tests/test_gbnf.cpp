// GBNF grammars (src/engine/gbnf_grammar.h) against independent references: PCRE2 decides regular grammars
// written as the same regular expression; nlohmann::json's own parser decides a GBNF grammar of all JSON (RFC
// 8259), which needs recursion, empty alternatives and text read several ways at once; hand-written recognizers
// decide balanced brackets and arithmetic. Masks through GPT-2's vocabulary allow exactly the tokens a full
// check of each token takes, and random replies walked through them are what the references accept.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <pcre2.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/gbnf_grammar.h"
#include "grammar_checks.h"

namespace kvserve {
namespace {

// Whether PCRE2 matches `pattern` against the whole of `text` (UTF mode).
class Pcre {
 public:
  explicit Pcre(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    const std::string anchored = "^(?:" + pattern + ")$";
    code_ =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(anchored.c_str()), anchored.size(), PCRE2_UTF, &err, &off, nullptr);
    EXPECT_NE(code_, nullptr) << pattern;
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~Pcre() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  Pcre(const Pcre&) = delete;
  Pcre& operator=(const Pcre&) = delete;
  bool matches(const std::string& text) const {
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data_, nullptr) >= 0;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

std::string random_text(std::mt19937& rng, const std::string& alphabet, size_t max_len) {
  std::uniform_int_distribution<size_t> len(0, max_len);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::string out;
  for (size_t n = len(rng); n > 0; --n) out.push_back(alphabet[pick(rng)]);
  return out;
}

std::string refusal(const std::string& grammar) {
  try {
    gbnf_grammar(grammar);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GbnfGrammar, HandPickedTexts) {
  struct Case {
    const char* grammar;
    std::vector<const char*> good, bad;
  };
  const std::vector<Case> cases = {
      {R"(root ::= "yes" | "no")", {"yes", "no"}, {"", "y", "yesno", "No"}},
      // A repetition that could take the byte after it too: the text is read both ways.
      {R"(root ::= [a-z]* "x")", {"x", "abx", "abxx", "xxx"}, {"", "ab", "xa", "aBx"}},
      {R"(root ::= ("ab" | "a")* "b")", {"b", "ab", "abb", "aab", "abab"}, {"", "a", "ba", "abba"}},
      // Recursion, and a root that may be empty.
      {"root ::= (\"(\" root \")\")*", {"", "()", "(())()", "((()))"}, {"(", ")(", "(()", "())"}},
      // Comments, alternatives over several lines, and rules in any order.
      {"# a list\nroot ::= item (\",\" item)*  # items\nitem ::=\n    num\n  | word\nnum ::= [0-9]+\nword ::= "
       "[a-z]+",
       {"1", "ab,12,c", "0,0"},
       {"", ",", "1,", "a b", "1,,2"}},
      // Optional parts in every position.
      {R"(root ::= "a"? "b"? "c"? "d")", {"d", "ad", "bd", "abcd", "acd"}, {"", "a", "abc", "dd", "ba"}},
      {R"(root ::= x? x? "!"
x ::= "x"?)",
       {"!", "x!", "xx!"},
       {"xxx!", "", "x"}},
      // Counted repetitions, written as rules where they are long.
      {R"(root ::= [0-9]{2,3} "-" "a"{1200,1201})", {}, {"1-a", "1234-a"}},
      {R"(root ::= "0x" [0-9a-fA-F]{1,4} ("," [0-9]{3})?)", {"0x1", "0xBEEF", "0xa,123"}, {"0x", "0x12345", "0x1,12"}},
      // Escapes, classes with ranges and negation, any character, UTF-8.
      {R"(root ::= "\"" ( [^"\\] | "\\" ["\\nt] )* "\"")",
       {"\"\"", "\"a b\"", "\"\\\"\"", "\"é\\n\""},
       {"\"", "\"a\"b\"", "\"\\x\""}},
      {R"(root ::= [\x41-\x43\u00e9] . [^\n]+ "\U0001F600")", {"Aé z😀", "éxy😀", "C\nq😀"}, {"D a😀", "A\n\n😀"}},
      {R"(root ::= "é"+ | [α-ω]{2})", {"é", "ééé", "αω"}, {"", "α", "αωα"}},
      {"root ::= [\\[\\]] \"\\[\"", {"[[", "]["}, {"[]"}},
      // Any ASCII punctuation escaped stands for itself, '-' in a class too.
      {R"(root ::= [a\-z]+ "\_\.")", {"a_.", "-z-_."}, {"b_.", "a\\_."}},
  };
  for (const Case& c : cases) {
    const auto g = gbnf_grammar(c.grammar);
    for (const char* t : c.good) EXPECT_TRUE(accepts(g, t)) << c.grammar << " should take '" << t << "'";
    for (const char* t : c.bad) EXPECT_FALSE(accepts(g, t)) << c.grammar << " should refuse '" << t << "'";
  }
  // More regular parts than the compiler makes patterns for: the rest are lowered as rules, just as exact.
  // Each rule refers to itself, so each is a pattern of its own.
  std::string many = "root ::=";
  std::string good;
  for (int k = 0; k < 300; ++k) {
    many += " r" + std::to_string(k);
    good += k % 7 == 3 ? fmt::format("(w{}a1)", k) : fmt::format("w{}{}", k, std::string(1 + k % 3, 'c'));
  }
  many += "\n";
  for (int k = 0; k < 300; ++k)
    many +=
        fmt::format("r{} ::= \"w{}\" [a-c]{{1,{}}} x{} | \"(\" r{} \")\"\nx{} ::= [0-9]?\n", k, k, 1 + k % 3, k, k, k);
  const auto wide = gbnf_grammar(many);
  EXPECT_TRUE(accepts(wide, good));
  for (const std::string& bad : {good + "c", good.substr(0, good.size() - 5), "w0d" + good.substr(3)})
    EXPECT_FALSE(accepts(wide, bad)) << bad;
  std::string late = good;
  late[late.rfind('w') + 1] = '7';  // the last rule's own word, changed
  EXPECT_FALSE(accepts(wide, late));
  // A long counted repetition (above a pattern's bound) is exact too.
  const auto g = gbnf_grammar(R"(root ::= [0-9]{2,3} "-" "a"{1200,1201})");
  EXPECT_TRUE(accepts(g, "12-" + std::string(1200, 'a')));
  EXPECT_TRUE(accepts(g, "123-" + std::string(1201, 'a')));
  EXPECT_FALSE(accepts(g, "12-" + std::string(1199, 'a')));
  EXPECT_FALSE(accepts(g, "12-" + std::string(1202, 'a')));
}

TEST(GbnfGrammar, RefusesByName) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"item ::= \"a\"", "no 'root' rule"},
      {"root ::= item", "does not define it"},
      {"root ::= \"a\"\nroot ::= \"b\"", "defines the rule 'root' twice"},
      {"root ::= expr\nexpr ::= expr \"+\" num | num\nnum ::= [0-9]+", "rule 'expr' can begin with itself"},
      // Left recursion behind a part that may be empty.
      {"root ::= pre? root \"x\" | \"y\"\npre ::= \"p\"", "rule 'root' can begin with itself"},
      {"root ::= <think> \"a\"", "token reference"},
      {"root ::= \"a\\q\"", "an escape"},
      {"root ::= \"abc", "close a literal"},
      {"root ::= [a-", "close a character class"},
      {"root ::= []", "empty character class"},
      {"root ::= [z-a]", "out of order"},
      {"root ::= \"a\"{3,2}", "out of order"},
      {"root ::= \"a\"{20000}", "more than 10000 times"},
      {"root ::= (\"a\"", "close a group"},
      {"root ::= \"\"", "matches only empty text"},
      {"root ::= a\na ::= \"x\" a", "matches no text"},
      {"root ::= \"a\" ::= \"b\"", "a rule name"},
      {"root ::= \"\\uD800\"", "not a character"},
      {"root = \"a\"", "'::='"},
      {"root ::= \"a\"*+?*+", "repeats a repetition"},
  };
  for (const auto& [grammar, expected] : cases) {
    const std::string what = refusal(grammar);
    EXPECT_NE(what.find(expected), std::string::npos) << grammar << ": " << what;
  }
  // Errors name the line and column.
  EXPECT_NE(refusal("root ::= \"a\"\n  | %").find("line 2, column 5"), std::string::npos)
      << refusal("root ::= \"a\"\n  | %");
  // Nesting and sizes are bounded.
  EXPECT_NE(refusal("root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')')).find("nests"),
            std::string::npos);
  std::string chain = "root ::= r0\n";
  for (int k = 0; k < 30; ++k) chain += "r" + std::to_string(k) + " ::= (r" + std::to_string(k + 1) + "){10000}\n";
  chain += "r30 ::= \"a\"";
  EXPECT_NE(refusal(chain).find("too large"), std::string::npos) << refusal(chain);
}

TEST(GbnfGrammar, RegularGrammarsAgreeWithPcre2) {
  struct Case {
    const char* grammar;
    const char* pattern;
    const char* alphabet;
  };
  const std::vector<Case> cases = {
      {R"(root ::= [a-c]* "b" [a-c]?)", "[a-c]*b[a-c]?", "abcd"},
      {R"(root ::= ("ab" | "a")* "b")", "(?:ab|a)*b", "ab"},
      {"root ::= x \"-\" x\nx ::= [0-9]{1,3}", "[0-9]{1,3}-[0-9]{1,3}", "12-"},
      {"root ::= item (\",\" ws item)*\nitem ::= [a-z]+ | \"\\\"\" [^\"]* \"\\\"\"\nws ::= \" \"?",
       "(?:[a-z]+|\"[^\"]*\")(?:, ?(?:[a-z]+|\"[^\"]*\"))*", "ab\", x"},
      {R"(root ::= ("a" | "b" "c"?){2,4} "c"*)", "(?:a|bc?){2,4}c*", "abc"},
      {R"(root ::= [^a]? [ab]+ .)", "[^a]?[ab]+.", "abé"},
      {"root ::= (\"x\" y?)+\ny ::= \"y\"+ | \"z\"", "(?:x(?:y+|z)?)+", "xyz"},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    const auto g = gbnf_grammar(c.grammar);
    const Pcre re(c.pattern);
    int matched = 0;
    for (int k = 0; k < 1500; ++k) {
      const std::string text = random_text(rng, c.alphabet, 9);
      const bool expected = re.matches(text);
      matched += expected;
      ASSERT_EQ(accepts(g, text), expected) << c.grammar << " on '" << text << "'";
    }
    EXPECT_GT(matched, 10) << c.grammar;
  }
}

// All of JSON (RFC 8259) as a GBNF grammar: nlohmann::json's parser decides every text.
constexpr const char* kJsonGbnf = R"(
root   ::= ws value ws
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member ::= string ws ":" ws value
array  ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n\r]*
)";

// A random JSON text, formatted with random whitespace (no \u escapes of surrogates, which nlohmann checks in
// pairs and the grammar does not).
std::string random_json(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> pick(0, depth > 3 ? 4 : 6);
  auto ws = [&] {
    static const char* spaces[] = {"", "", " ", "\n", "\t ", "\r\n  "};
    return std::string(spaces[std::uniform_int_distribution<int>(0, 5)(rng)]);
  };
  switch (pick(rng)) {
    case 0:
      return std::vector<std::string>{"true", "false", "null"}[static_cast<size_t>(rng() % 3)];
    case 1: {
      static const char* numbers[] = {"0", "-0", "12", "3.25", "-1e5", "6.02E+23", "1e-3", "10"};
      return numbers[rng() % 8];
    }
    case 2:
    case 3: {
      static const char* strings[] = {"\"\"", "\"a b\"", "\"\\n\\\"\\\\\"", "\"\\u00e9é\"", "\"x\\/y\\t\""};
      return strings[rng() % 5];
    }
    case 4:
    case 5: {
      std::string out = "[" + ws();
      const int n = static_cast<int>(rng() % 3);
      for (int k = 0; k < n; ++k) out += (k ? ws() + "," + ws() : "") + random_json(rng, depth + 1);
      return out + ws() + "]";
    }
    default: {
      std::string out = "{" + ws();
      const int n = static_cast<int>(rng() % 3);
      for (int k = 0; k < n; ++k)
        out += (k ? "," + ws() : "") + "\"k" + std::to_string(k) + "\"" + ws() + ":" + ws() +
               random_json(rng, depth + 1) + ws();
      return out + "}";
    }
  }
}

TEST(GbnfGrammar, JsonGrammarAgreesWithAJsonParser) {
  const auto g = gbnf_grammar(kJsonGbnf);
  std::mt19937 rng(11);
  const std::string mutations = "{}[],:\"\\ \n0123456789.eE+-tfnrulaxé\x01";
  int valid = 0, invalid = 0;
  for (int k = 0; k < 1500; ++k) {
    std::string text = random_json(rng, 0);
    // Most texts get a few random edits.
    const int edits = static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      const char c = mutations[rng() % mutations.size()];
      switch (rng() % 3) {
        case 0:
          text.insert(at, 1, c);
          break;
        case 1:
          text.erase(at, 1);
          break;
        default:
          text[at] = c;
      }
    }
    const bool expected = nlohmann::json::accept(text);
    (expected ? valid : invalid)++;
    ASSERT_EQ(accepts(g, text), expected) << "'" << text << "'";
  }
  EXPECT_GT(valid, 300);
  EXPECT_GT(invalid, 300);
}

// Balanced brackets of two kinds, and arithmetic, against hand-written recognizers.
bool balanced(const std::string& s) {
  std::string open;
  for (char c : s) {
    if (c == '(' || c == '[') {
      open.push_back(c);
    } else {
      if (open.empty() || (c == ')' ? '(' : '[') != open.back()) return false;
      open.pop_back();
    }
  }
  return open.empty();
}

// expr := term (('+'|'-') term)*; term := factor ('*' factor)*; factor := digits | '(' expr ')' | '-' factor
class Arithmetic {
 public:
  explicit Arithmetic(const std::string& s) : s_(s) {}
  bool valid() { return expr() && i_ == s_.size(); }

 private:
  bool expr() {
    if (!term()) return false;
    while (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) {
      ++i_;
      if (!term()) return false;
    }
    return true;
  }
  bool term() {
    if (!factor()) return false;
    while (i_ < s_.size() && s_[i_] == '*') {
      ++i_;
      if (!factor()) return false;
    }
    return true;
  }
  bool factor() {
    if (i_ < s_.size() && s_[i_] == '-') {
      ++i_;
      return factor();
    }
    if (i_ < s_.size() && s_[i_] == '(') {
      ++i_;
      if (!expr() || i_ >= s_.size() || s_[i_] != ')') return false;
      ++i_;
      return true;
    }
    const size_t from = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > from;
  }
  const std::string& s_;
  size_t i_ = 0;
};

TEST(GbnfGrammar, ContextFreeGrammarsAgreeWithRecognizers) {
  const auto brackets = gbnf_grammar("root ::= ( \"(\" root \")\" | \"[\" root \"]\" )*");
  const auto arithmetic = gbnf_grammar(R"g(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor ("*" factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor)g");
  std::mt19937 rng(5);
  int good_brackets = 0, good_arithmetic = 0;
  for (int k = 0; k < 3000; ++k) {
    const std::string b = random_text(rng, "()[]", 10);
    good_brackets += balanced(b);
    ASSERT_EQ(accepts(brackets, b), balanced(b)) << b;
    const std::string a = random_text(rng, "12+-*()", 9);
    const bool expected = Arithmetic(a).valid();
    good_arithmetic += expected;
    ASSERT_EQ(accepts(arithmetic, a), expected) << a;
  }
  EXPECT_GT(good_brackets, 30);
  EXPECT_GT(good_arithmetic, 30);
}

// Inside a JSON string of the GBNF grammar, the mask takes raw tokens by their first byte the string does not
// loop on (a newline refuses the token at once): exact all the same, and in a pattern that may end (where a
// reading forks off at every byte) too.
TEST(GbnfGrammar, MasksInsideLoopingTextAreExact) {
  const auto json = gbnf_grammar(kJsonGbnf);
  // The end is recursive, so the free text before it is a pattern of its own, read on past each '.'.
  const auto tail = gbnf_grammar(R"g(root ::= [^"]* end
end ::= ".\"" | "(" end ")")g");
  for (const auto& [g, prefix] :
       std::vector<std::pair<std::shared_ptr<const Grammar>, std::string>>{{json, "\""},
                                                                           {json, "[\"ab"},
                                                                           {json, "{\"k\": \"x y"},
                                                                           {json, "\"\\n\u00e9"},
                                                                           {tail, "ab"},
                                                                           {tail, "a.b"},
                                                                           {tail, "x.(("}}) {
    GrammarMatcher m(g, gpt2_table());
    for (unsigned char c : prefix) ASSERT_TRUE(m.accept(byte_tokens()[c])) << prefix;
    checked_mask(m, prefix);
  }
}

// Replies written through the masks: every mask is exact at the points checked, and every finished reply is
// one the reference accepts.
TEST(GbnfGrammar, RandomRepliesThroughARealVocabularyAreValid) {
  const GrammarTokenTable& table = gpt2_table();
  struct Case {
    std::shared_ptr<const Grammar> grammar;
    std::function<bool(const std::string&)> valid;
  };
  const std::vector<Case> cases = {
      {gbnf_grammar(kJsonGbnf), [](const std::string& t) { return nlohmann::json::accept(t); }},
      {gbnf_grammar("root ::= ( \"(\" root \")\" | \"[\" root \"]\" )*"), balanced},
      {gbnf_grammar(R"(root ::= [a-z]* "x" [0-9]{1,2})"),
       [](const std::string& t) { return Pcre("[a-z]*x[0-9]{1,2}").matches(t); }},
  };
  std::mt19937 rng(3);
  int finished = 0, checked = 0;
  for (const Case& c : cases) {
    for (int walk = 0; walk < 6; ++walk) {
      GrammarMatcher m(c.grammar, table);
      std::string text;
      for (int step = 0; step < 40; ++step) {
        std::vector<float> logits(static_cast<size_t>(table.size()));
        for (float& l : logits) l = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
        // Later on, closing bytes and the end are likelier, so most replies finish.
        if (step >= 12) {
          for (char close : std::string(")]}\"0x"))
            logits[static_cast<size_t>(byte_tokens()[static_cast<unsigned char>(close)])] += 2.0f;
          for (int32_t id : table.end_of_generation_ids()) logits[static_cast<size_t>(id)] += 3.0f;
        }
        const int64_t allowed = m.mask(logits.data(), table.size());
        ASSERT_GT(allowed, 0) << text;
        if (step % 4 == 1 && walk < 2) {
          expect_mask_is_exact(m, logits, text);
          ++checked;
        }
        int32_t best = 0;
        for (int32_t id = 1; id < table.size(); ++id)
          if (logits[static_cast<size_t>(id)] > logits[static_cast<size_t>(best)]) best = id;
        if (table.end_of_generation(best)) {
          EXPECT_TRUE(c.valid(text)) << text;
          ++finished;
          break;
        }
        ASSERT_TRUE(m.accept(best)) << text << " + " << table.bytes(best);
        text += table.bytes(best);
      }
    }
  }
  EXPECT_GE(finished, 12);
  EXPECT_GE(checked, 12);
}

}  // namespace
}  // namespace kvserve
