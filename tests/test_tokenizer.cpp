// Tokenizer tests against the reference outputs: llama.cpp's test-tokenizer-0 cases for every
// vocabulary GGUF in shared/models/vocab, llama2.c's tokenization of stories260K, round trips,
// streaming detokenization and chat templates.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/chat_template.h"
#include "model/loaders.h"
#include "model/model_cache.h"
#include "model/pretokenizer.h"
#include "model/stream_decoder.h"
#include "model/tokenizer.h"
#include "model/unicode.h"

namespace kvserve {
namespace {

const std::string kShared = KVSERVE_SHARED_DIR;
const std::string kVocabDir = kShared + "/models/vocab";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Reads `<vocab>.inp` / `<vocab>.out` exactly as llama.cpp's test-tokenizer-0 does: inputs are separated
// by "\n__ggml_vocab_test__\n" (the file's final separator leaves no empty case behind), outputs are
// lines of space-separated ids.
std::vector<VocabCase> read_vocab_cases(const std::string& gguf_path) {
  const std::string raw = read_file(gguf_path + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(gguf_path + ".out");
  std::vector<std::string> outputs;
  for (std::string line; std::getline(out, line);) outputs.push_back(line);
  EXPECT_EQ(inputs.size(), outputs.size()) << gguf_path;
  std::vector<VocabCase> cases;
  for (size_t i = 0; i < std::min(inputs.size(), outputs.size()); ++i) {
    VocabCase c{inputs[i], {}};
    std::istringstream ids(outputs[i]);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string ids_to_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

// llama.cpp's own vocabulary tests as a newer llama.cpp ships them (scripts/fetch_llama_cpp_vocab.sh,
// which scripts/setup.sh runs): Gemma 4, Qwen3.5, Llama-3 BPE, Qwen2 and Command-R, which shared/ lacks.
std::string llama_cpp_vocab_dir() { return model_cache_dir() + "/llama.cpp-vocab-0.3.36"; }

// Runs at test registration, before main: a missing ../shared must not abort the binary (gtest discovery
// runs it to list the tests), so an unreadable directory gives no cases and the test below says why.
std::vector<std::string> vocab_files_with_cases(const std::string& dir = kVocabDir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() == ".gguf" && std::filesystem::exists(path + ".inp") &&
        std::filesystem::exists(path + ".out")) {
      files.push_back(path);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

class TokenizerVocabTest : public ::testing::TestWithParam<std::string> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TokenizerVocabTest);

TEST(TokenizerVocab, SharedVocabDirectoryHasTestCases) {
  EXPECT_FALSE(vocab_files_with_cases().empty())
      << "no <vocab>.gguf with .inp/.out cases in " << kVocabDir << " (is ../shared beside the repo?)";
}

TEST_P(TokenizerVocabTest, MatchesLlamaCppExactly) {
  const std::string path = GetParam();
  Vocab vocab = load_gguf_vocab(path);
  auto tok = Tokenizer::create(std::move(vocab));
  const auto cases = read_vocab_cases(path);
  ASSERT_FALSE(cases.empty());
  int failures = 0;
  for (const VocabCase& c : cases) {
    const auto ids = tok->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    if (ids != c.ids) {
      ++failures;
      ADD_FAILURE() << path << "\n  text:     '" << c.text << "'\n  expected: " << ids_to_string(c.ids)
                    << "\n  got:      " << ids_to_string(ids);
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << cases.size() << " cases differ";
}

// Special tokens parsed out of chat-like text, against llama.cpp's llama_tokenize with parse_special
// (scripts/make_special_token_fixture.py): Phi-3's special tokens swallow the whitespace after them
// (llama.cpp's RSTRIP, set for a vocabulary named Phi-3), all but <unk>, <s> and <|endoftext|>; Llama's
// swallow none.
TEST(TokenizerVocab, SpecialTokensStripWhitespaceAsLlamaCppDoes) {
  std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/tokenizer/special_tokens_llama_cpp_0.3.36.json");
  const nlohmann::json fixture = nlohmann::json::parse(in);
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers;
  int checked = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string path = llama_cpp_vocab_dir() + "/" + c["vocab"].get<std::string>();
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " (run scripts/fetch_llama_cpp_vocab.sh)";
    auto& tok = tokenizers[path];
    if (!tok) tok = Tokenizer::create(load_gguf_vocab(path));
    const std::string text = c["text"];
    EXPECT_EQ(tok->encode(text, c["add_special"].get<bool>(), /*parse_special=*/true),
              c["ids"].get<std::vector<int32_t>>())
        << c["vocab"] << " '" << text << "'";
    ++checked;
  }
  EXPECT_EQ(checked, 36);
}

TEST(TokenizerVocab, LlamaCppVocabularyTestsAreFetched) {
  // CI fetches them in set-up; without them Gemma 4 and Qwen3.5 would go untested.
  EXPECT_GE(vocab_files_with_cases(llama_cpp_vocab_dir()).size(), 15u)
      << "llama.cpp's vocabulary tests are missing from " << llama_cpp_vocab_dir()
      << " (run scripts/fetch_llama_cpp_vocab.sh)";
}

std::string vocab_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = std::filesystem::path(info.param).stem().string();
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, TokenizerVocabTest, ::testing::ValuesIn(vocab_files_with_cases()),
                         vocab_test_name);
INSTANTIATE_TEST_SUITE_P(LlamaCpp0336, TokenizerVocabTest,
                         ::testing::ValuesIn(vocab_files_with_cases(llama_cpp_vocab_dir())), vocab_test_name);

// Round trip: decoding what was encoded gives the text back, for texts every vocabulary can represent
// (byte fallback / byte-level symbols cover all bytes).
TEST_P(TokenizerVocabTest, DecodeInvertsEncode) {
  const std::string path = GetParam();
  Vocab vocab = load_gguf_vocab(path);
  // WordPiece is lossy by design (lowercase, accents dropped, words rejoined by single spaces):
  // WordPieceDecodeGivesNormalizedWords covers it.
  if (vocab.kind == Vocab::Kind::WPM) return;
  auto tok = Tokenizer::create(std::move(vocab));
  const bool byte_complete = tok->vocab().kind == Vocab::Kind::BPE ||
                             std::find(tok->vocab().tokens.begin(), tok->vocab().tokens.end(), "<0xE4>") !=
                                 tok->vocab().tokens.end();
  for (const std::string text : {"Hello world", " leading and trailing  ", "tabs\tand\nnewlines\n\n",
                                 "naïve café 3.14159", "你好，世界 🦙", "don't stop"}) {
    if (!byte_complete && std::string_view(text).find('\xE4') != std::string_view::npos) continue;
    for (const bool add_special : {false, true}) {
      const auto ids = tok->encode(text, add_special, false);
      EXPECT_EQ(tok->decode(ids), text) << path << " add_special=" << add_special;
    }
  }
}

// stories260K: llama2.c's run.c tokenization (README: equal to llama.cpp's for these inputs), with the
// vocabulary from the llama2.c tokenizer file and from the GGUF conversion.
void check_stories_tokenization(const Tokenizer& tok) {
  std::ifstream in(kShared + "/golden/stories260K/tokenize.jsonl");
  ASSERT_TRUE(in.good());
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const std::string text = j.at("text");
    const auto expected = j.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(ids_to_string(tok.encode(text, true, false)), ids_to_string(expected)) << "text: '" << text << "'";
    ++n;
  }
  EXPECT_GT(n, 10);
}

TEST(TokenizerStories, Llama2cTokenizerBin) {
  auto tok = Tokenizer::create(load_llama2c_vocab(kShared + "/models/stories260K/tok512.bin", 512));
  check_stories_tokenization(*tok);
}

TEST(TokenizerStories, GgufVocab) {
  auto tok = Tokenizer::create(load_gguf_vocab(kShared + "/golden/gguf/models/stories260K-F32.gguf"));
  check_stories_tokenization(*tok);
}

// The prompts of llama.cpp's golden runs: prompt_ids is llama.cpp's tokenization with BOS.
TEST(TokenizerGoldenGguf, PromptIdsMatchLlamaCpp) {
  const std::string dir = kShared + "/golden/gguf";
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/golden")) {
    if (entry.path().extension() != ".jsonl") continue;
    const std::string model = dir + "/models/" + entry.path().stem().string() + ".gguf";
    if (!std::filesystem::exists(model)) continue;
    auto tok = Tokenizer::create(load_gguf_vocab(model));
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line);
      const std::string prompt = j.at("prompt");
      EXPECT_EQ(ids_to_string(tok->encode(prompt, true, false)),
                ids_to_string(j.at("prompt_ids").get<std::vector<int32_t>>()))
          << model << " prompt '" << prompt << "'";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(TokenizerStories, DecodeStripsDummySpaceAfterBos) {
  auto tok = Tokenizer::create(load_llama2c_vocab(kShared + "/models/stories260K/tok512.bin", 512));
  EXPECT_EQ(tok->decode({1, 403, 407, 261, 378}), "Once upon a time");
  EXPECT_EQ(tok->decode({403, 407}), "Once upon");
  EXPECT_EQ(tok->decode({1, 403, 407}, /*special=*/true), "<s>Once upon");
  EXPECT_EQ(tok->encode("", true, false), std::vector<int32_t>{1});
  EXPECT_EQ(tok->encode(" ", true, false), (std::vector<int32_t>{1, 410, 410}));
  // Multi-byte text falls back to byte tokens and decodes back to the same bytes.
  for (const std::string text : {"naïve", "你好", "emoji 🦙 here"}) {
    EXPECT_EQ(tok->decode(tok->encode(text, true, false)), text);
  }
}

// llama.cpp's test-tokenizer-1-spm on its Llama SPM vocabulary: every token's text, and every Unicode
// code point, tokenized (special text parsed) and decoded again gives the same text.
TEST(TokenizerSpm, EveryTokenAndCodePointRoundTripsAsLlamaCppChecks) {
  auto tok = Tokenizer::create(load_gguf_vocab(kVocabDir + "/ggml-vocab-llama-spm.gguf"));
  int failures = 0;
  for (int32_t id = 0; id < tok->n_vocab(); ++id) {
    const std::string text = tok->decode({id}, /*special=*/true);
    const std::string again = tok->decode(tok->encode(text, false, true), true);
    if (again != text && ++failures <= 5) ADD_FAILURE() << "token " << id << ": '" << text << "' -> '" << again << "'";
  }
  for (uint32_t cpt = 0; cpt < 0x110000; ++cpt) {
    if ((cpt >= 0xD800 && cpt <= 0xDFFF) || (cpt >= 0x40000 && cpt <= 0xE0000)) continue;
    if (cpt == 0x2581) continue;  // "▁" itself decodes as a space, in llama.cpp too
    std::string text;
    unicode::append_utf8(text, cpt);
    const std::string again = tok->decode(tok->encode(text, false, true), true);
    if (again != text && ++failures <= 10) ADD_FAILURE() << "code point " << cpt << " -> '" << again << "'";
  }
  EXPECT_EQ(failures, 0);
}

TEST(TokenizerSpm, ParseSpecialSplitsControlTokens) {
  auto tok = Tokenizer::create(load_gguf_vocab(kVocabDir + "/ggml-vocab-llama-spm.gguf"));
  const auto plain = tok->encode("<s>Hi", false, false);
  const auto special = tok->encode("<s>Hi", false, true);
  EXPECT_NE(plain.front(), 1);
  ASSERT_GE(special.size(), 2u);
  EXPECT_EQ(special.front(), 1);
  // After a special token the dummy prefix is added again: "Hi" -> "▁Hi".
  EXPECT_EQ(std::vector<int32_t>(special.begin() + 1, special.end()), tok->encode("Hi", false, false));
  EXPECT_EQ(tok->token_to_piece(1), "");
  EXPECT_EQ(tok->token_to_piece(1, true), "<s>");
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(1));
}

TEST(TokenizerBpe, ParseSpecialAndEog) {
  auto tok = Tokenizer::create(load_gguf_vocab(kVocabDir + "/ggml-vocab-gpt-2.gguf"));
  const int32_t eot = 50256;  // <|endoftext|>
  EXPECT_EQ(tok->encode("a<|endoftext|>b", false, true).at(1), eot);
  const auto plain = tok->encode("a<|endoftext|>b", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_TRUE(tok->is_eog(eot));
  EXPECT_EQ(tok->token_to_piece(eot), "");
  EXPECT_EQ(tok->token_to_piece(eot, true), "<|endoftext|>");
}

TEST(TokenizerBpe, UnknownPreTokenizerIsAClearError) {
  Vocab v = load_gguf_vocab(kVocabDir + "/ggml-vocab-gpt-2.gguf");
  v.pre = "no-such-pre";
  try {
    Tokenizer::create(std::move(v));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-pre"), std::string::npos) << e.what();
  }
}

TEST(TokenizerBpe, EveryKnownPreTokenizerCompiles) {
  for (const char* pre : {"default", "llama-bpe", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "mpt",
                          "starcoder", "gpt-2", "refact", "command-r", "qwen2", "stablelm2", "olmo", "dbrx",
                          "smollm", "poro-chat", "viking", "tekken", "chameleon", "gpt-4o", "seed-coder",
                          "bailingmoe", "superbpe", "chatglm-bpe", "qwen35", "gemma4", "sarvam-moe"}) {
    EXPECT_NO_THROW({
      PreTokenizer p(pre);
      p.split("Hello, world! 123456 don't  \n\n 你好 🦙");
    }) << pre;
  }
}

TEST(TokenizerBpe, Llama3RegexSplits) {
  PreTokenizer p("llama-bpe");
  EXPECT_EQ(p.split("Hello world's 12345  \n\n x"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", "123", "45", "  \n\n", " x"}));
}

TEST(TokenizerBpe, Qwen35KeepsCombiningMarksInsideWords) {
  // "e" + U+0301 (combining acute): Qwen2's regex ends the word before the mark, Qwen3.5's keeps it.
  const std::string text = "caf" "e\xCC\x81s ok";
  EXPECT_EQ(PreTokenizer("qwen35").split(text), (std::vector<std::string>{"caf" "e\xCC\x81s", " ok"}));
  EXPECT_EQ(PreTokenizer("qwen2").split(text), (std::vector<std::string>{"cafe", "\xCC\x81s", " ok"}));
}

// Gemma 4's BPE on a hand-made vocabulary small enough to know every answer: spaces as U+2581, merges on
// raw UTF-8, "<0xXX>" byte fallback, a newline run taken whole when it is a token.
TEST(TokenizerBpe, Gemma4SentencePieceStyle) {
  Vocab v;
  v.kind = Vocab::Kind::BPE;
  v.pre = "gemma4";
  v.tokens = {"<pad>", "<eos>", "<bos>", "\xE2\x96\x81", "h", "i", "\xE2\x96\x81h", "\xE2\x96\x81hi", "\n",
              "\n\n\n", "<0xC3>", "<0xA9>", "<turn|>"};
  v.token_types.assign(v.tokens.size(), TokenType::Normal);
  for (const int id : {0, 1, 2, 12}) v.token_types[id] = TokenType::Control;
  v.token_types[10] = v.token_types[11] = TokenType::Byte;
  v.merges = {"\xE2\x96\x81 h", "\xE2\x96\x81h i"};
  v.bos_id = 2, v.eos_id = 1, v.add_bos = true, v.add_space_prefix = false;
  auto tok = Tokenizer::create(v);
  // "é" (C3 A9) has no token: its bytes; "\n\n\n" is one token although no merge builds it; "\n\n" is not
  // a token, so it stays two.
  const std::string text = " hi\n\n\n\xC3\xA9\n\n";
  const std::vector<int32_t> ids = tok->encode(text, true, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 7, 9, 10, 11, 8, 8}));
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(tok->token_to_piece(7), " hi");
  EXPECT_TRUE(tok->is_eog(12));
  EXPECT_EQ(tok->encode("<turn|>", false, true), (std::vector<int32_t>{12}));
}

// ---------------------------------------------------------------------------------------------------
// StreamDecoder

TEST(StreamDecoder, HoldsBackPartialCharacters) {
  auto tok = Tokenizer::create(load_llama2c_vocab(kShared + "/models/stories260K/tok512.bin", 512));
  const std::string text = "Hi 你好 naïve 🦙!";
  const auto ids = tok->encode(text, true, false);
  StreamDecoder stream(*tok);
  std::string streamed;
  for (const int32_t id : ids) {
    const std::string chunk = stream.feed(id);
    // Every chunk is complete UTF-8 on its own.
    EXPECT_EQ(unicode::incomplete_utf8_tail(chunk), 0u) << "chunk '" << chunk << "'";
    streamed += chunk;
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(streamed, tok->decode(ids));
}

// A completion continues its prompt: what the stream gives is what decoding prompt + completion adds to
// decoding the prompt, so the first word keeps its space; after a lone BOS the dummy-prefix space goes, as
// in decode().
TEST(StreamDecoder, StartAfterAPromptKeepsTheSpaceBeforeTheFirstWord) {
  auto tok = Tokenizer::create(load_llama2c_vocab(kShared + "/models/stories260K/tok512.bin", 512));
  const auto prompt = tok->encode("Lily and Ben", true, false);
  const auto whole = tok->encode("Lily and Ben were playing", true, false);
  ASSERT_GT(whole.size(), prompt.size());
  ASSERT_TRUE(std::equal(prompt.begin(), prompt.end(), whole.begin()));
  const std::vector<int32_t> completion(whole.begin() + static_cast<std::ptrdiff_t>(prompt.size()), whole.end());
  const auto stream = [&](std::span<const int32_t> context) {
    StreamDecoder d(*tok);
    d.start_after(context);
    std::string text;
    for (const int32_t id : completion) text += d.feed(id);
    return text + d.flush();
  };
  EXPECT_EQ(stream(prompt), " were playing");
  EXPECT_EQ(stream(prompt), tok->decode(whole).substr(tok->decode(prompt).size()));
  // After a lone BOS the completion starts the text; with no context at all, too.
  const std::vector<int32_t> bos{tok->bos()};
  EXPECT_EQ(stream(bos), "were playing");
  EXPECT_EQ(stream({}), "were playing");
}

TEST(StreamDecoder, ByteLevelBpe) {
  auto tok = Tokenizer::create(load_gguf_vocab(kVocabDir + "/ggml-vocab-gpt-2.gguf"));
  const std::string text = " 🦙 llamas — ünïcödé";
  const auto ids = tok->encode(text, false, false);
  StreamDecoder stream(*tok);
  std::string streamed;
  size_t held_back_somewhere = 0;
  for (const int32_t id : ids) {
    const std::string chunk = stream.feed(id);
    if (chunk.size() != tok->token_to_piece(id).size()) ++held_back_somewhere;
    streamed += chunk;
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_GT(held_back_somewhere, 0u);  // the emoji spans several tokens
}

TEST(StreamDecoder, FlushReturnsUnfinishedBytes) {
  auto tok = Tokenizer::create(load_llama2c_vocab(kShared + "/models/stories260K/tok512.bin", 512));
  StreamDecoder stream(*tok);
  EXPECT_EQ(stream.feed(3 + 0xE4), "");  // first byte of a 3-byte character
  EXPECT_EQ(stream.feed(3 + 0xBD), "");
  EXPECT_EQ(stream.flush(), "\xE4\xBD");
}

// ---------------------------------------------------------------------------------------------------
// Chat templates

const std::vector<ChatMessage> kChat = {
    {"system", "You are helpful."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};

TEST(ChatTemplate, ChatML) {
  Vocab v;
  v.chat_template = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                    "'<|im_end|>' + '\n'}}{% endfor %}";
  // The family renders the assistant header the template fragment leaves out; the template itself (Jinja)
  // writes what it says.
  EXPECT_EQ(apply_chat_template(detect_chat_template(v.chat_template), kChat, true),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(v, kChat, true),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
  EXPECT_EQ(apply_chat_template(v, {{"user", "Hi"}}, false), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, FallsBackToChatML) {
  Vocab v;
  EXPECT_EQ(detect_chat_template(v.chat_template), ChatTemplateFamily::ChatML);
  EXPECT_EQ(apply_chat_template(v, {{"user", "Hi"}}, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama2) {
  Vocab v;
  v.chat_template = "{% if messages[0]['role'] == 'system' %}<<SYS>>\\n' + system_message + '\\n<</SYS>>{% endif %}"
                    "{{ bos_token + '[INST] ' + content + ' [/INST]' }}";
  EXPECT_EQ(detect_chat_template(v.chat_template), ChatTemplateFamily::Llama2SysBos);
  EXPECT_EQ(apply_chat_template(v, kChat, true),
            "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST]Hello!</s><s>[INST] Bye [/INST]");
  EXPECT_EQ(apply_chat_template(ChatTemplateFamily::Llama2, kChat, true),
            "[INST] You are helpful.\nHi [/INST]Hello!</s>[INST] Bye [/INST]");
  EXPECT_EQ(apply_chat_template(ChatTemplateFamily::Llama2Sys, kChat, true),
            "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST]Hello!</s>[INST] Bye [/INST]");
}

TEST(ChatTemplate, Llama3) {
  Vocab v;
  v.chat_template = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + "
                    "'<|eot_id|>' }}";
  EXPECT_EQ(detect_chat_template(v.chat_template), ChatTemplateFamily::Llama3);
  EXPECT_EQ(apply_chat_template(v, {{"system", "Be brief. "}, {"user", " Hi"}}, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_template(v, {{"user", "Hi"}}, false), "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, Gemma) {
  Vocab v;
  v.chat_template = "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}";
  EXPECT_EQ(detect_chat_template(v.chat_template), ChatTemplateFamily::Gemma);
  EXPECT_EQ(apply_chat_template(v, kChat, true),
            "<start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

}  // namespace
}  // namespace kvserve
