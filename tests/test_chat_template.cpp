// Chat templates against llama.cpp 0.3.36 (as llama-cpp-python 0.3.36 vendors it), from
// tests/golden/chat_templates/llama_cpp_0.3.36.json (scripts/make_chat_template_fixture.py):
// - every real Jinja template of llama.cpp's tests/test-chat-template.cpp is detected as the family that
//   renders that test's conversation to its expected text;
// - every built-in family, by name, renders six conversations exactly as llama.cpp's own
//   llama_chat_apply_template did.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/chat_template.h"
#include "model/model_cache.h"
#include "server/request_parser.h"

namespace kvserve {
namespace {

const std::string kFixture = std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/chat_templates/llama_cpp_0.3.36.json";

nlohmann::json read_fixture() {
  std::ifstream in(kFixture);
  if (!in) return nlohmann::json::object();
  return nlohmann::json::parse(in);
}

struct TemplateCase {
  std::string name;
  std::string jinja;
  std::string expected;
};

// gtest names a failing case by this instead of dumping its bytes.
void PrintTo(const TemplateCase& c, std::ostream* os) { *os << c.name; }

std::vector<TemplateCase> fixture_cases() {
  std::vector<TemplateCase> cases;
  const nlohmann::json fixture = read_fixture();
  for (const auto& c : fixture.value("cases", nlohmann::json::array()))
    cases.push_back(
        {c.at("name").get<std::string>(), c.at("template").get<std::string>(), c.at("expected").get<std::string>()});
  return cases;
}

std::vector<ChatMessage> fixture_conversation() {
  const nlohmann::json fixture = read_fixture();
  std::vector<ChatMessage> msgs;
  for (const auto& m : fixture.at("conversation"))
    msgs.push_back({m.at(0).get<std::string>(), m.at(1).get<std::string>()});
  return msgs;
}

TEST(ChatTemplateLlamaCpp, FixtureHasTheTestsCases) { EXPECT_GE(fixture_cases().size(), 30u) << kFixture; }

class ChatTemplateLlamaCpp : public ::testing::TestWithParam<TemplateCase> {};

TEST_P(ChatTemplateLlamaCpp, RendersAsLlamaCpp) {
  const TemplateCase& c = GetParam();
  const ChatTemplateFamily family = detect_chat_template(c.jinja);
  EXPECT_EQ(apply_chat_template(family, fixture_conversation(), /*add_generation_prompt=*/true), c.expected)
      << c.name << " (detected as " << chat_template_name(family) << ")";
}

TEST(ChatTemplateLlamaCpp, EveryBuiltinFamilyRendersAsLlamaCpp) {
  const nlohmann::json fixture = read_fixture();
  ASSERT_TRUE(fixture.contains("builtin")) << kFixture;
  std::set<std::string> names;
  int failures = 0;
  for (const auto& c : fixture.at("builtin")) {
    const std::string name = c.at("name").get<std::string>();
    names.insert(name);
    const auto family = chat_template_from_name(name);
    if (!family) {
      ADD_FAILURE() << "llama.cpp's built-in template '" << name << "' is unknown here";
      continue;
    }
    EXPECT_EQ(chat_template_name(*family), name);
    EXPECT_EQ(detect_chat_template(name), *family);
    std::vector<ChatMessage> msgs;
    for (const auto& m : c.at("conversation")) msgs.push_back({m.at(0).get<std::string>(), m.at(1).get<std::string>()});
    const bool add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    const std::string got = apply_chat_template(*family, msgs, add_generation_prompt);
    if (got != c.at("expected").get<std::string>() && ++failures <= 20) {
      ADD_FAILURE() << name << " (" << msgs.size() << " messages, generation prompt " << add_generation_prompt
                    << ")\n  expected: " << c.at("expected").dump() << "\n  got:      " << nlohmann::json(got).dump();
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GE(names.size(), 50u);
}

// llama.cpp's real templates (models/templates/*.jinja, installed by scripts/fetch_llama_cpp_vocab.sh):
// detected and rendered as llama.cpp's built-in path does, and ChatML where llama.cpp knows no family.
TEST(ChatTemplateLlamaCpp, RealJinjaTemplatesAsLlamaCppDetectsThem) {
  const nlohmann::json fixture = read_fixture();
  ASSERT_TRUE(fixture.contains("jinja_files")) << kFixture;
  const std::filesystem::path dir = std::filesystem::path(model_cache_dir()) / "llama.cpp-vocab-0.3.36" / "templates";
  const std::vector<ChatMessage> conversation = fixture_conversation();
  int rendered = 0;
  for (const auto& c : fixture.at("jinja_files")) {
    const std::string file = c.at("file").get<std::string>();
    std::ifstream in(dir / file, std::ios::binary);
    if (!in) {
      ADD_FAILURE() << "missing " << (dir / file) << " (run scripts/fetch_llama_cpp_vocab.sh)";
      continue;
    }
    const std::string jinja((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const ChatTemplateFamily family = detect_chat_template(jinja);
    if (c.at("expected").is_null()) {
      EXPECT_EQ(family, ChatTemplateFamily::ChatML)
          << file << " has no llama.cpp family, detected as " << chat_template_name(family);
      continue;
    }
    EXPECT_EQ(apply_chat_template(family, conversation, true), c.at("expected").get<std::string>())
        << file << " (detected as " << chat_template_name(family) << ")";
    ++rendered;
  }
  EXPECT_GE(rendered, 45);
}

namespace {

// One of llama.cpp's real templates (models/templates, installed by scripts/fetch_llama_cpp_vocab.sh) as a
// vocabulary's template; a failure naming the file when it is missing.
std::optional<Vocab> vocab_of_template(const std::string& file) {
  const std::filesystem::path path =
      std::filesystem::path(model_cache_dir()) / "llama.cpp-vocab-0.3.36" / "templates" / file;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "missing " << path << " (run scripts/fetch_llama_cpp_vocab.sh)";
    return std::nullopt;
  }
  Vocab vocab;
  vocab.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return vocab;
}

// A jinja2 golden of tests/golden/chat_templates; null (and a failure) when it cannot be read.
nlohmann::json read_jinja_golden(const std::string& name) {
  std::ifstream g(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/chat_templates/" + name);
  if (!g) {
    ADD_FAILURE() << "missing golden " << name;
    return nullptr;
  }
  return nlohmann::json::parse(g);
}

// A jinja2 golden's "conversations": lists of {role, content}.
std::vector<std::vector<ChatMessage>> golden_conversations(const nlohmann::json& golden) {
  std::vector<std::vector<ChatMessage>> conversations;
  for (const auto& c : golden.at("conversations")) {
    std::vector<ChatMessage>& conv = conversations.emplace_back();
    for (const auto& m : c) conv.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  }
  return conversations;
}

// Each template of a jinja2 golden that is installed here, rendered by kvserve for each of the golden's
// conversations (at its "today") against jinja2's text; `check` looks at the template's vocabulary first.
// Returns how many renderings were compared.
int expect_templates_render_as_golden(const nlohmann::json& golden,
                                      const std::function<void(const Vocab&, const std::string&)>& check) {
  const std::string today = golden.at("today").get<std::string>();
  const std::vector<std::vector<ChatMessage>> conversations = golden_conversations(golden);
  int compared = 0;
  for (const auto& t : golden.at("templates")) {
    const std::string file = t.at("file").get<std::string>();
    const std::optional<Vocab> vocab = vocab_of_template(file);
    if (!vocab) continue;
    check(*vocab, file);
    for (size_t i = 0; i < conversations.size(); ++i) {
      // The Jinja renderer, and the family fallback with its default system turns.
      EXPECT_EQ(apply_chat_template(*vocab, conversations[i], true, today), t.at("rendered").at(i).get<std::string>())
          << file << " conversation " << i;
      EXPECT_EQ(apply_family_chat_template(*vocab, conversations[i], true, today),
                t.at("rendered").at(i).get<std::string>())
          << file << " conversation " << i << " (family)";
      ++compared;
    }
  }
  return compared;
}

}  // namespace

// A ChatML template's default system turn, against jinja2 (transformers' renderer) on llama.cpp's real
// templates (tests/golden/chat_templates/chatml_default_system.json, scripts/make_chatml_default_system_golden.py):
// a conversation of one user message renders byte for byte as jinja2 renders it wherever the template's
// prompt is plain ChatML turns, with the default system message (Qwen2.5's "You are Qwen, ...") where it
// has one. SmolLM3's system turn is built from flags and the date: not rendered (left as llama.cpp's).
TEST(ChatTemplateJinja, ChatMLDefaultSystemMessageAsJinja2RendersIt) {
  const nlohmann::json golden = read_jinja_golden("chatml_default_system.json");
  ASSERT_FALSE(golden.is_null());
  const std::vector<ChatMessage> conversation{{"user", golden.at("user").get<std::string>()}};
  int compared = 0, with_system = 0;
  for (const auto& c : golden.at("templates")) {
    const std::string file = c.at("file").get<std::string>();
    if (!c.at("plain_chatml").get<bool>() || file == "HuggingFaceTB-SmolLM3-3B.jinja") continue;
    const std::optional<Vocab> template_vocab = vocab_of_template(file);
    if (!template_vocab) continue;
    const Vocab& vocab = *template_vocab;
    ASSERT_EQ(detect_chat_template(vocab.chat_template), ChatTemplateFamily::ChatML) << file;
    EXPECT_EQ(apply_chat_template(vocab, conversation, true), c.at("rendered").get<std::string>()) << file;
    EXPECT_EQ(apply_family_chat_template(vocab, conversation, true, "05 Dec 2026"), c.at("rendered").get<std::string>())
        << file << " (family)";
    const std::optional<std::string> system = chatml_default_system_message(vocab.chat_template);
    EXPECT_EQ(system.has_value(), !c.at("default_system").is_null()) << file;
    with_system += system.has_value() ? 1 : 0;
    ++compared;
  }
  EXPECT_GE(compared, 8);
  EXPECT_GE(with_system, 2);  // Qwen2.5, MiMo-VL
}

// Llama 3.1 / 3.2 / 3.3 open every conversation with a system header (knowledge cutoff, a date, then the
// conversation's own system message): three conversations render byte for byte as jinja2 renders Meta's
// templates (tests/golden/chat_templates/llama3_header.json, scripts/make_llama3_header_golden.py), 3.2 with
// the day's date the golden was made on.
TEST(ChatTemplateJinja, Llama3SystemHeaderAsJinja2RendersIt) {
  const nlohmann::json golden = read_jinja_golden("llama3_header.json");
  ASSERT_FALSE(golden.is_null());
  const std::string today = golden.at("today").get<std::string>();
  const std::vector<std::vector<ChatMessage>> conversations = golden_conversations(golden);
  const int compared = expect_templates_render_as_golden(golden, [](const Vocab& vocab, const std::string& file) {
    EXPECT_EQ(detect_chat_template(vocab.chat_template), ChatTemplateFamily::Llama3) << file;
  });
  EXPECT_GE(compared, 9);
  // A llama3 template without the header (llama.cpp's own name for the family) renders as llama.cpp does.
  Vocab named;
  named.chat_template = "llama3";
  EXPECT_EQ(llama3_header_date(named.chat_template, today), std::nullopt);
  EXPECT_EQ(apply_chat_template(named, conversations[0], true, today),
            apply_chat_template(ChatTemplateFamily::Llama3, conversations[0], true));
}

// IBM's Granite templates, as jinja2 renders them (tests/golden/chat_templates/granite_default_system.json,
// scripts/make_granite_default_system_golden.py): 3.3 and 4.0 open a conversation without a system message
// with their own (3.3's with the day's date), 4.1 with none; a conversation's own system message replaces it.
TEST(ChatTemplateJinja, GraniteDefaultSystemMessageAsJinja2RendersIt) {
  const nlohmann::json golden = read_jinja_golden("granite_default_system.json");
  ASSERT_FALSE(golden.is_null());
  const std::string today = golden.at("today").get<std::string>();
  const std::vector<std::vector<ChatMessage>> conversations = golden_conversations(golden);
  int with_default = 0;
  const int compared = expect_templates_render_as_golden(golden, [&](const Vocab& vocab, const std::string&) {
    if (granite_default_system_message(vocab.chat_template, today)) ++with_default;
  });
  EXPECT_GE(compared, 12);
  EXPECT_EQ(with_default, 2);
  // The family named by llama.cpp's name renders as llama.cpp's built-in renderer does.
  Vocab named;
  named.chat_template = "granite";
  EXPECT_EQ(granite_default_system_message(named.chat_template, today), std::nullopt);
  EXPECT_EQ(apply_chat_template(named, conversations[0], true, today),
            apply_chat_template(ChatTemplateFamily::Granite, conversations[0], true));
}

// SmolLM2's template (the default model's, as its GGUF holds it, newlines real) and the \n-escaped form:
// the default system message opens a conversation without one, and a conversation's own system message
// replaces it. Expected strings: jinja2's rendering of the same template.
TEST(ChatTemplateJinja, SmolLM2DefaultSystemMessage) {
  Vocab vocab;
  vocab.chat_template =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' "
      "+ message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt "
      "%}{{ '<|im_start|>assistant\n' }}{% endif %}";
  EXPECT_EQ(chatml_default_system_message(vocab.chat_template),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(apply_chat_template(vocab, {{"user", "What is 2+2?"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(vocab, {{"system", "Be brief."}, {"user", "Hi"}}, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A request's prompt: the assistant's header; after a final assistant message, the model goes on with it.
  EXPECT_EQ(render_chat_prompt(vocab, {{"system", "Be brief."}, {"user", "Hi"}}, "05 Dec 2026", nullptr),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(
      render_chat_prompt(vocab, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello, I am"}}, "05 Dec 2026",
                         nullptr),
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello, I am");
  // Escaped newlines in the literal: the same message.
  const std::string escaped = "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}";
  EXPECT_EQ(chatml_default_system_message(escaped), "You are a helpful assistant.");
  // A system turn built from the conversation is no default; neither is a plain ChatML template.
  EXPECT_EQ(chatml_default_system_message("{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>' }}"),
            std::nullopt);
  EXPECT_EQ(chatml_default_system_message(""), std::nullopt);
}

TEST(ChatTemplateLlamaCpp, UnknownTemplatesFallBackToChatML) {
  EXPECT_EQ(detect_chat_template(""), ChatTemplateFamily::ChatML);
  EXPECT_EQ(detect_chat_template("{{ messages }}"), ChatTemplateFamily::ChatML);
  EXPECT_EQ(chat_template_from_name("no-such-template"), std::nullopt);
}

INSTANTIATE_TEST_SUITE_P(Fixture, ChatTemplateLlamaCpp, ::testing::ValuesIn(fixture_cases()),
                         [](const ::testing::TestParamInfo<TemplateCase>& info) {
                           std::string name = std::to_string(info.index) + "_" + info.param.name;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name.substr(0, 60);
                         });

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

// Every real template of llama.cpp 0.3.36 as a model's template: the server's prompt for the conversations
// of tests/golden/chat_templates/jinja2_render.json without tools is jinja2's text (transformers'
// apply_chat_template), less the BOS text the tokenizer adds itself; where jinja2 refuses the conversation
// through the template's raise_exception, kvserve refuses it too (a 400 in the server).
TEST(ChatTemplateJinja, EveryRealTemplateRendersAsTransformersDoes) {
  const nlohmann::json golden = read_jinja_golden("jinja2_render.json");
  ASSERT_FALSE(golden.is_null());
  const std::string bos = golden.at("bos_token"), eos = golden.at("eos_token"), today = golden.at("today");
  int compared = 0, refused = 0;
  for (const auto& c : golden.at("cases")) {
    if (!c.contains("file")) continue;
    const std::string file = c.at("file").get<std::string>();
    std::optional<Vocab> vocab = vocab_of_template(file);
    if (!vocab) continue;
    vocab->tokens = {"<unk>", bos, eos};
    vocab->bos_id = 1;
    vocab->eos_id = 2;
    for (const bool add_bos : {true, false}) {
      vocab->add_bos = add_bos;
      for (size_t i = 0; i < c.at("rendered").size(); ++i) {
        const auto& conv = golden.at("conversations").at(i);
        if (!conv.at("tools").is_null()) continue;
        std::vector<ChatMessage> msgs;
        for (const auto& m : conv.at("messages")) msgs.push_back({m.at("role"), m.at("content")});
        const bool add_generation_prompt = conv.at("add_generation_prompt");
        const auto& expected = c.at("rendered").at(i);
        if (expected.is_object()) {
          if (expected.at("error") == "TemplateError") {
            EXPECT_THROW(apply_chat_template(*vocab, msgs, add_generation_prompt, today), Error) << file << " " << i;
            ++refused;
          }
          continue;
        }
        std::string want = expected.get<std::string>();
        if (add_bos && want.compare(0, bos.size(), bos) == 0) want.erase(0, bos.size());
        EXPECT_EQ(apply_chat_template(*vocab, msgs, add_generation_prompt, today), want) << file << " " << i;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 700);
  EXPECT_GE(refused, 6);
}

// A request's chat_template_kwargs reach the template as variables: Qwen3's and SmolLM3's enable_thinking,
// Granite 3.3's thinking, as jinja2 renders them (the golden's "kwargs_cases").
TEST(ChatTemplateJinja, TemplateKwargsRenderAsJinja2Does) {
  const nlohmann::json golden = read_jinja_golden("jinja2_render.json");
  ASSERT_FALSE(golden.is_null());
  const std::string today = golden.at("today");
  int compared = 0;
  for (const auto& c : golden.at("kwargs_cases")) {
    const std::string file = c.at("file");
    const std::optional<Vocab> vocab = vocab_of_template(file);
    if (!vocab) continue;
    const auto& conv = golden.at("conversations").at(c.at("conversation").get<size_t>());
    std::vector<ChatMessage> msgs;
    for (const auto& m : conv.at("messages")) msgs.push_back({m.at("role"), m.at("content")});
    const std::string with = apply_chat_template(*vocab, msgs, conv.at("add_generation_prompt"), today, c.at("kwargs"));
    EXPECT_EQ(with, c.at("rendered").get<std::string>()) << file;
    EXPECT_NE(with, apply_chat_template(*vocab, msgs, conv.at("add_generation_prompt"), today)) << file;
    ++compared;
  }
  EXPECT_EQ(compared, 4);
}

// A chat request with tools, an assistant's tool call and the tool's result, sent as an OpenAI client sends
// it (the call's arguments as JSON text), through the server's request parser: every real template's prompt
// is jinja2's for the golden's tool conversations (tools and arguments as transformers passes them, keys in
// the order given), or refused where jinja2's template refuses it.
TEST(ChatTemplateJinja, ToolConversationsThroughTheServerRenderAsTransformersDoes) {
  using oj = nlohmann::ordered_json;
  std::ifstream g(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/chat_templates/jinja2_render.json");
  ASSERT_TRUE(g);
  const oj golden = oj::parse(std::string(std::istreambuf_iterator<char>(g), std::istreambuf_iterator<char>()));
  const std::string bos = golden.at("bos_token"), eos = golden.at("eos_token"), today = golden.at("today");
  int compared = 0, refused = 0, with_calls = 0;
  for (const auto& c : golden.at("cases")) {
    if (!c.contains("file")) continue;
    std::optional<Vocab> vocab = vocab_of_template(c.at("file").get<std::string>());
    if (!vocab) continue;
    vocab->tokens = {"<unk>", bos, eos};
    vocab->bos_id = 1;
    vocab->eos_id = 2;
    vocab->add_bos = false;
    for (size_t i = 0; i < c.at("rendered").size(); ++i) {
      const oj& conv = golden.at("conversations").at(i);
      if (conv.at("tools").is_null()) continue;
      oj body = {{"messages", conv.at("messages")}, {"tools", conv.at("tools")}};
      for (oj& m : body["messages"])
        if (m.contains("tool_calls"))
          for (oj& call : m["tool_calls"]) call["function"]["arguments"] = call["function"]["arguments"].dump();
      const server::ApiRequest req = server::parse_api_request(server::Endpoint::ChatCompletions, body.dump());
      const oj vars = server::chat_template_variables(req.chat_template_kwargs, req.tools);
      const bool add_generation_prompt = conv.at("add_generation_prompt");
      const oj& expected = c.at("rendered").at(i);
      const std::string where = c.at("file").get<std::string>() + " " + std::to_string(i);
      if (expected.is_object()) {
        if (expected.at("error") == "TemplateError") {
          EXPECT_THROW(apply_chat_template(*vocab, req.messages, add_generation_prompt, today, vars), Error) << where;
          ++refused;
        }
        continue;
      }
      EXPECT_EQ(apply_chat_template(*vocab, req.messages, add_generation_prompt, today, vars), expected.get<std::string>())
          << where;
      ++compared;
      with_calls += req.messages.size() > 1 && req.messages[1].extra.contains("tool_calls");
    }
  }
  EXPECT_GE(compared, 100);
  EXPECT_GE(with_calls, 45);
  EXPECT_GE(refused, 1);
}

// A template's raise_exception reaches the caller as an Error with the template's own words.
TEST(ChatTemplateJinja, TemplateRaiseExceptionIsAnErrorNamingIt) {
  Vocab vocab;
  vocab.chat_template =
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
      "{{ m.content }}{% endfor %}";
  EXPECT_EQ(apply_chat_template(vocab, {{"user", "a"}, {"assistant", "b"}}, true, "05 Dec 2026"), "ab");
  try {
    apply_chat_template(vocab, {{"user", "a"}, {"user", "b"}}, true, "05 Dec 2026");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Conversation roles must alternate"), std::string::npos) << e.what();
  }
  // A template kvserve's Jinja does not render (an include) falls back to its family.
  vocab.chat_template = "{% include 'x' %}<|im_start|>";
  EXPECT_EQ(apply_chat_template(vocab, {{"user", "Hi"}}, true, "05 Dec 2026"),
            apply_chat_template(ChatTemplateFamily::ChatML, {{"user", "Hi"}}, true));
}

}  // namespace
}  // namespace kvserve
