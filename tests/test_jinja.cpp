// The Jinja renderer against jinja2 (tests/golden/chat_templates/jinja2_render.json, made by
// scripts/make_jinja_golden.py in transformers' environment): every real chat template of llama.cpp
// 0.3.36 and of its chat template test, for eight conversations (tools and tool calls among them), byte
// for byte, and refusing where jinja2 refuses; plus the language's corners one by one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "jinja/template.h"
#include "model/model_cache.h"

namespace kvserve::jinja {
namespace {

const std::string kGoldenDir = std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/chat_templates/";

nlohmann::ordered_json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  return nlohmann::ordered_json::parse(in);
}

// The variables transformers gives a chat template, with strftime_now fixed at the golden's day.
Object chat_globals(const nlohmann::ordered_json& conversation, const std::string& bos, const std::string& eos) {
  Object g;
  g.set("messages", Value::from_json(conversation.at("messages")));
  g.set("add_generation_prompt", Value(conversation.at("add_generation_prompt").get<bool>()));
  g.set("tools", Value::from_json(conversation.at("tools")));
  g.set("bos_token", Value(bos));
  g.set("eos_token", Value(eos));
  g.set("raise_exception", Value(Function([](const CallArgs& a) -> Value {
          throw TemplateRaised(a.positional.empty() ? "" : a.positional[0].str());
        })));
  g.set("strftime_now", Value(Function([](const CallArgs& a) -> Value {
          std::tm day{};
          day.tm_year = 2026 - 1900;
          day.tm_mon = 11;
          day.tm_mday = 5;
          day.tm_wday = 6;
          day.tm_yday = 338;
          char buf[128] = {};
          std::strftime(buf, sizeof buf, a.positional.at(0).as_string().c_str(), &day);
          return Value(std::string(buf));
        })));
  return g;
}

std::string render(std::string_view source, const Object& globals) { return Template(source).render(globals); }

TEST(JinjaGolden, RealChatTemplatesRenderAsJinja2Does) {
  const nlohmann::ordered_json golden = read_json(kGoldenDir + "jinja2_render.json");
  ASSERT_FALSE(golden.is_null());
  const nlohmann::ordered_json fixture = read_json(kGoldenDir + "llama_cpp_0.3.36.json");
  const std::filesystem::path dir = std::filesystem::path(model_cache_dir()) / "llama.cpp-vocab-0.3.36" / "templates";
  const std::string bos = golden.at("bos_token"), eos = golden.at("eos_token");
  int same = 0, refused = 0, templates = 0;
  for (const auto& c : golden.at("cases")) {
    std::string source;
    if (c.contains("file")) {
      std::ifstream in(dir / c.at("file").get<std::string>(), std::ios::binary);
      if (!in) {
        ADD_FAILURE() << "missing " << (dir / c.at("file").get<std::string>())
                      << " (run scripts/fetch_llama_cpp_vocab.sh)";
        continue;
      }
      source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } else {
      source = fixture.at("cases").at(c.at("fixture_index").get<size_t>()).at("template");
    }
    ++templates;
    const std::string name = c.at("name");
    for (size_t i = 0; i < c.at("rendered").size(); ++i) {
      const auto& expected = c.at("rendered")[i];
      const Object globals = chat_globals(golden.at("conversations").at(i), bos, eos);
      if (expected.is_object()) {
        EXPECT_ANY_THROW(render(source, globals)) << name << " conversation " << i << ": jinja2 refuses it";
        ++refused;
        continue;
      }
      try {
        const std::string got = render(source, globals);
        const std::string want = expected.get<std::string>();
        if (got == want) {
          ++same;
        } else {
          size_t at = 0;
          while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
          const size_t from = at > 60 ? at - 60 : 0;
          ADD_FAILURE() << name << " conversation " << i << " differs at byte " << at
                        << "\n got: " << testing::PrintToString(got.substr(from, 160))
                        << "\nwant: " << testing::PrintToString(want.substr(from, 160));
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << " conversation " << i << ": " << e.what();
      }
    }
  }
  EXPECT_GE(templates, 100);
  EXPECT_GT(same, 600);
  EXPECT_GT(refused, 50);
}

}  // namespace
}  // namespace kvserve::jinja

namespace kvserve::jinja {
namespace {

// The language's corners one snippet at a time (whitespace control, Python's printing, string methods,
// filters, tests, loops and their scoping, macros, block set and filter, generators, Markup, and errors),
// each against jinja2's output or refusal (the golden's "snippets").
TEST(JinjaGolden, SnippetsRenderAsJinja2Does) {
  const nlohmann::ordered_json golden = read_json(kGoldenDir + "jinja2_render.json");
  ASSERT_FALSE(golden.is_null());
  Object vars = chat_globals(
      nlohmann::ordered_json{
          {"messages", nlohmann::ordered_json::array()}, {"add_generation_prompt", false}, {"tools", nullptr}},
      "", "");
  for (const auto& [k, v] : golden.at("snippet_vars").items()) vars.set(k, Value::from_json(v));
  int rendered = 0, refused = 0;
  for (const auto& s : golden.at("snippets")) {
    const std::string source = s.at("source");
    if (s.at("rendered").is_object()) {
      EXPECT_THROW(render(source, vars), Error) << source;
      ++refused;
      continue;
    }
    try {
      EXPECT_EQ(render(source, vars), s.at("rendered").get<std::string>()) << source;
      ++rendered;
    } catch (const std::exception& e) {
      ADD_FAILURE() << source << ": " << e.what();
    }
  }
  EXPECT_GE(rendered, 20);
  EXPECT_GE(refused, 15);
}

}  // namespace
}  // namespace kvserve::jinja

namespace kvserve::jinja {
namespace {

std::string render_plain(std::string_view source) { return Template(source).render(Object{}); }

// A hostile or broken template fails with an Error naming the limit, quickly: loop steps, work (a loop
// growing a string), string size, nesting of tags, expressions and values; a namespace holding itself is
// freed (the ASan build would report the leak).
TEST(JinjaLimits, HostileTemplatesFailWithAnError) {
  EXPECT_THROW(render_plain("{% set ns = namespace(s='') %}{% for x in range(1000000) %}"
                            "{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' %}{% endfor %}"),
               Error);
  EXPECT_THROW(render_plain("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"), Error);
  EXPECT_THROW(render_plain("{{ 'a' * 100000000 }}"), Error);
  EXPECT_THROW(render_plain("{{ range(100000000)|length }}"), Error);
  EXPECT_EQ(render_plain("{{ " + std::string(30, '(') + "1" + std::string(30, ')') + " }}"), "1");
  EXPECT_THROW(render_plain("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}"), Error);
  std::string chain = "{{ x";
  for (int i = 0; i < 1000; ++i) chain += ".a";
  EXPECT_THROW(render_plain(chain + " }}"), Error);
  std::string sum = "{{ 1";
  for (int i = 0; i < 1000; ++i) sum += " + 1";
  EXPECT_THROW(render_plain(sum + " }}"), Error);
  std::string ifs;
  for (int i = 0; i < 500; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 500; ++i) ifs += "{% endif %}";
  EXPECT_THROW(render_plain(ifs), Error);
  EXPECT_THROW(
      render_plain("{% set ns = namespace(x=[]) %}{% for i in range(300) %}{% set ns.x = [ns.x] %}{% endfor %}"),
      Error);
  EXPECT_EQ(render_plain("{% set ns = namespace(x=none) %}{% set ns.x = [ns] %}{{ ns.x|length }}"), "1");
  EXPECT_THROW(render_plain("{% set ns = namespace(x=none) %}{% set ns.x = [ns] %}{{ ns|tojson }}"), Error);
  EXPECT_THROW(render_plain("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"), Error);
  // Python's ints have no bounds; past int64 kvserve refuses instead of wrapping.
  EXPECT_THROW(render_plain("{{ 9223372036854775807 + 1 }}"), Error);
  EXPECT_THROW(render_plain("{{ 3037000500 * 3037000500 }}"), Error);
  EXPECT_THROW(render_plain("{{ 2 ** 64 }}"), Error);
  EXPECT_THROW(render_plain("{{ 4e22|int }}"), Error);
  EXPECT_THROW(render_plain("{{ -(-9223372036854775807 - 1) }}"), Error);
  EXPECT_EQ(render_plain("{{ (-1) ** 1000001 }} {{ 2 ** 62 }} {{ -9223372036854775807 - 1 }}"),
            "-1 4611686018427387904 -9223372036854775808");
}

}  // namespace
}  // namespace kvserve::jinja
