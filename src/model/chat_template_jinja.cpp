// A vocabulary's chat template rendered by kvserve's Jinja renderer, with the variables transformers'
// apply_chat_template gives it.
#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "jinja/template.h"
#include "model/chat_template.h"

namespace kvserve {

namespace {

// Parsing a long template (tools, reasoning) costs more than rendering it: the last one parsed is kept.
struct ParsedTemplate {
  std::string source;
  std::shared_ptr<const jinja::Template> parsed;  // null when the source does not parse
};

std::shared_ptr<const jinja::Template> parse_cached(const std::string& source) {
  static std::mutex mu;
  static ParsedTemplate last;
  std::lock_guard<std::mutex> lock(mu);
  if (last.parsed && last.source == source) return last.parsed;
  last.source = source;
  try {
    last.parsed = std::make_shared<const jinja::Template>(source);
  } catch (const Error& e) {
    last.parsed = nullptr;
    fmt::print(stderr, "kvserve: the chat template is rendered by its built-in family instead ({})\n", e.what());
  }
  return last.parsed;
}

std::string token_text(const Vocab& vocab, int32_t id) {
  return id >= 0 && static_cast<size_t>(id) < vocab.tokens.size() ? vocab.tokens[static_cast<size_t>(id)] : "";
}

jinja::Value strftime_today(std::string_view today, const jinja::CallArgs& args) {
  const jinja::Value* format = args.get(0, "format");
  if (format == nullptr || !format->is_string()) fail("strftime_now() needs a format string");
  std::tm day{};
  const std::string text(today);
  if (strptime(text.c_str(), "%d %b %Y", &day) == nullptr) fail("bad date '{}'", text);
  std::mktime(&day);  // fills in the weekday and the day of the year
  char out[256] = {};
  std::strftime(out, sizeof out, format->as_string().c_str(), &day);
  return jinja::Value(std::string(out));
}

bool looks_like_jinja(const std::string& s) {
  return s.find("{%") != std::string::npos || s.find("{{") != std::string::npos;
}

}  // namespace

std::optional<std::string> render_jinja_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs,
                                                      bool add_generation_prompt, std::string_view today,
                                                      const nlohmann::ordered_json& template_kwargs) {
  if (!looks_like_jinja(vocab.chat_template)) return std::nullopt;
  const std::shared_ptr<const jinja::Template> tmpl = parse_cached(vocab.chat_template);
  if (!tmpl) return std::nullopt;

  jinja::Array messages;
  for (const ChatMessage& m : msgs) {
    auto o = std::make_shared<jinja::Object>();
    o->set("role", jinja::Value(m.role));
    o->set("content", jinja::Value(m.content));
    if (m.extra.is_object())
      for (const auto& [key, value] : m.extra.items())
        if (key != "role" && key != "content") o->set(key, jinja::Value::from_json(value));
    messages.emplace_back(std::move(o));
  }
  const std::string bos = token_text(vocab, vocab.bos_id), eos = token_text(vocab, vocab.eos_id);
  jinja::Object globals;
  globals.set("messages", jinja::Value(std::move(messages)));
  globals.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  globals.set("bos_token", jinja::Value(bos));
  globals.set("eos_token", jinja::Value(eos));
  globals.set("tools", jinja::Value::none());
  globals.set("documents", jinja::Value::none());
  globals.set("raise_exception", jinja::Value(jinja::Function([](const jinja::CallArgs& a) -> jinja::Value {
                throw jinja::TemplateRaised(a.positional.empty() ? "" : a.positional[0].str());
              })));
  const std::string day(today);
  globals.set("strftime_now",
              jinja::Value(jinja::Function([day](const jinja::CallArgs& a) { return strftime_today(day, a); })));
  if (template_kwargs.is_object())
    for (const auto& [key, value] : template_kwargs.items())
      if (key != "messages") globals.set(key, jinja::Value::from_json(value));
  std::string text;
  try {
    text = tmpl->render(globals);
  } catch (const jinja::TemplateRaised& e) {
    fail("the chat template rejects this conversation: {}", e.what());
  } catch (const Error& e) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true))
      fmt::print(stderr, "kvserve: the chat template is rendered by its built-in family instead ({})\n", e.what());
    return std::nullopt;
  }
  // The tokenizer adds BOS (and EOS) itself where the vocabulary asks: the template's own would double it.
  if (vocab.add_bos && !bos.empty() && text.compare(0, bos.size(), bos) == 0) text.erase(0, bos.size());
  if (vocab.add_eos && !eos.empty() && text.size() >= eos.size() &&
      text.compare(text.size() - eos.size(), eos.size(), eos) == 0)
    text.erase(text.size() - eos.size());
  return text;
}

}  // namespace kvserve
