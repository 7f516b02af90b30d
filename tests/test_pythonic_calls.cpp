// The pythonic tool-call format's literals (src/server/pythonic_calls.h) against what Python's ast.literal_eval and
// json.dumps make of the same text: each case's expected JSON is Python's, written out by hand.
#include <gtest/gtest.h>

#include <string>

#include "server/pythonic_calls.h"

namespace kvserve::server {
namespace {

using json = nlohmann::ordered_json;

// The one argument `x` of `[f(x=VALUE)]`, as JSON text; "" when the text is not a call.
std::string arg(const std::string& value) {
  const auto calls = parse_pythonic_calls("[f(x=" + value + ")]");
  if (!calls || calls->size() != 1) return "";
  return (*calls)[0].arguments.at("x").dump();
}

TEST(PythonicCalls, NumbersAsPythonReadsThem) {
  EXPECT_EQ(arg("42"), "42");
  EXPECT_EQ(arg("-7"), "-7");
  EXPECT_EQ(arg("+ 7"), "7");
  EXPECT_EQ(arg("--3"), "3");
  EXPECT_EQ(arg("1_000_000"), "1000000");
  EXPECT_EQ(arg("0x1F"), "31");
  EXPECT_EQ(arg("-0o17"), "-15");
  EXPECT_EQ(arg("0b101"), "5");
  EXPECT_EQ(arg("2.5"), "2.5");
  EXPECT_EQ(arg("5."), "5.0");
  EXPECT_EQ(arg(".5"), "0.5");
  EXPECT_EQ(arg("-1.5e-3"), "-0.0015");
  EXPECT_EQ(arg("1e3"), "1000.0");
  EXPECT_EQ(arg("0"), "0");
  EXPECT_EQ(arg("-9223372036854775808"), "-9223372036854775808");
  EXPECT_EQ(arg("18446744073709551615"), "18446744073709551615");
  // Python refuses these, or JSON cannot hold them.
  EXPECT_EQ(arg("007"), "");
  EXPECT_EQ(arg("1j"), "");
  EXPECT_EQ(arg("0x"), "");
  EXPECT_EQ(arg("1__0"), "10");  // Python refuses a double underscore; accepting it loses nothing
  EXPECT_EQ(arg("inf"), "");
  EXPECT_EQ(arg("1 + 2"), "");
}

TEST(PythonicCalls, StringsAsPythonReadsThem) {
  EXPECT_EQ(arg("'a'"), R"("a")");
  EXPECT_EQ(arg(R"("it's")"), R"("it's")");
  EXPECT_EQ(arg(R"('say \"hi\"')"), R"("say \"hi\"")");
  EXPECT_EQ(arg(R"('tab\there')"), R"("tab\there")");
  EXPECT_EQ(arg(R"('\x41\101\u00e9\U0001F600')"), "\"AA\u00e9\U0001F600\"");
  EXPECT_EQ(arg(R"('\ud83d\ude00')"), "\"\U0001F600\"");  // a surrogate pair joins
  EXPECT_EQ(arg(R"('\ud83d')"), "\"\uFFFD\"");            // a lone half: U+FFFD
  EXPECT_EQ(arg(R"('\q')"), R"("\\q")");                  // unknown escapes stay
  EXPECT_EQ(arg(R"(r'\d+\'')"), R"("\\d+\\'")");
  EXPECT_EQ(arg("'''two\nlines'''"), R"("two\nlines")");
  EXPECT_EQ(arg(R"("""a "quoted" word""")"), R"("a \"quoted\" word")");
  EXPECT_EQ(arg(R"('a' "b" u'c')"), R"("abc")");
  EXPECT_EQ(arg("'line\\\ncontinued'"), R"("linecontinued")");
  EXPECT_EQ(arg("'caf\xc3\xa9'"), "\"caf\u00e9\"");
  EXPECT_EQ(arg("'open"), "");
  EXPECT_EQ(arg("'new\nline'"), "");  // a single-quoted string cannot hold a newline
  EXPECT_EQ(arg(R"(b'bytes')"), "");
  EXPECT_EQ(arg(R"(f'{x}')"), "");
  EXPECT_EQ(arg(R"('\N{BULLET}')"), "");
  EXPECT_EQ(arg(R"('\x4')"), "");
}

TEST(PythonicCalls, ContainersAndConstants) {
  EXPECT_EQ(arg("True"), "true");
  EXPECT_EQ(arg("None"), "null");
  EXPECT_EQ(arg("[1, 'a', [False]]"), R"([1,"a",[false]])");
  EXPECT_EQ(arg("[1, 2,]"), "[1,2]");
  EXPECT_EQ(arg("(1, 2)"), "[1,2]");
  EXPECT_EQ(arg("(1,)"), "[1]");
  EXPECT_EQ(arg("()"), "[]");
  EXPECT_EQ(arg("(3)"), "3");
  EXPECT_EQ(arg("{'a': 1, 2: None, True: 'x', 1.5: []}"), R"({"a":1,"2":null,"true":"x","1.5":[]})");
  EXPECT_EQ(arg("{}"), "{}");
  EXPECT_EQ(arg("{\n  'k': [\n    1\n  ]\n}"), R"({"k":[1]})");
  EXPECT_EQ(arg("{1, 2}"), "");    // a set
  EXPECT_EQ(arg("{[1]: 2}"), "");  // an unhashable key
  EXPECT_EQ(arg("true"), "");      // JSON's spelling is a name in Python
  EXPECT_EQ(arg("[1 2]"), "");
  // The argument is level 1: a number inside kMaxPythonicDepth - 1 lists is at the limit.
  std::string deep = "1";
  for (int i = 1; i < kMaxPythonicDepth; ++i) deep = "[" + deep + "]";
  EXPECT_NE(arg(deep), "");
  EXPECT_EQ(arg("[" + deep + "]"), "");  // deeper than the limit: refused, not a stack overflow
}

TEST(PythonicCalls, TheListOfCalls) {
  const auto calls = parse_pythonic_calls("  [get_weather(city='Paris', days=3),\n get_time(), g(a=1,)]  ");
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 3u);
  EXPECT_EQ((*calls)[0].name, "get_weather");
  EXPECT_EQ((*calls)[0].arguments.dump(), R"({"city":"Paris","days":3})");
  EXPECT_EQ((*calls)[1].name, "get_time");
  EXPECT_EQ((*calls)[1].arguments.dump(), "{}");
  EXPECT_EQ((*calls)[2].arguments.dump(), R"({"a":1})");
  for (const char* not_calls :
       {"", "[]", "get_time()", "[get_time]", "[get_time()] extra", "[f(a=1) g()]", "[f(1)]", "[f(a=1, a=2)]", "[f(a)]",
        "[os.system(c='x')]", "[f(**k)]", "[1, f()]", "[f(a=1)", "[f(a=b)]", "[[f()]]"})
    EXPECT_FALSE(parse_pythonic_calls(not_calls)) << not_calls;
}

}  // namespace
}  // namespace kvserve::server
