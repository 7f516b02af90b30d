// libFuzzer target: arbitrary bytes as a chat template, parsed and rendered for a three-message
// conversation with the variables a chat template gets (and a tool). A template may fail only with
// kvserve::Error (a syntax error, what jinja2 would raise, or a limit: loop steps, output and string size,
// nesting); anything else, a crash, a leak or a hang is a bug.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"
#include "jinja/template.h"

using namespace kvserve;

namespace {

jinja::Object make_globals() {
  const auto conversation = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}])");
  const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  jinja::Object g;
  g.set("messages", jinja::Value::from_json(conversation));
  g.set("tools", jinja::Value::from_json(tools));
  g.set("add_generation_prompt", jinja::Value(true));
  g.set("bos_token", jinja::Value("<s>"));
  g.set("eos_token", jinja::Value("</s>"));
  g.set("raise_exception", jinja::Value(jinja::Function([](const jinja::CallArgs& a) -> jinja::Value {
          throw jinja::TemplateRaised(a.positional.empty() ? "" : a.positional[0].str());
        })));
  g.set("strftime_now",
        jinja::Value(jinja::Function([](const jinja::CallArgs&) { return jinja::Value("05 Dec 2026"); })));
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const jinja::Object globals = make_globals();
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const jinja::Template t(source);
    (void)t.render(globals);
  } catch (const Error&) {
  }
  return 0;
}
