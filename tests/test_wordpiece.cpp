// WordPiece (BERT) tokenizer: ids against Hugging Face's `tokenizers` (tests/data/wpm/, made by
// scripts/make_wpm_fixture.py), special tokens, decoding, and the Unicode helpers it splits text by.
// llama.cpp's own cases for the same vocabulary run in test_tokenizer.cpp (TokenizerVocabTest).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/loaders.h"
#include "model/tokenizer.h"
#include "model/unicode.h"

namespace kvserve {
namespace {

const std::string kBgeVocab = std::string(KVSERVE_SHARED_DIR) + "/models/vocab/ggml-vocab-bert-bge.gguf";

std::unique_ptr<Tokenizer> bge() { return Tokenizer::create(load_gguf_vocab(kBgeVocab)); }

TEST(WordPiece, MatchesHuggingFaceTokenizers) {
  auto tok = bge();
  std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/data/wpm/bert_bge_reference.jsonl");
  ASSERT_TRUE(in) << "missing tests/data/wpm/bert_bge_reference.jsonl";
  int cases = 0, failures = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    const std::string text = j["text"];
    const std::vector<int32_t> expected = j["ids"];
    ++cases;
    // Hugging Face always splits out special-token text: parse_special.
    const auto got = tok->encode(text, /*add_special=*/false, /*parse_special=*/true);
    if (got != expected) {
      ++failures;
      ADD_FAILURE() << "text: " << nlohmann::json(text).dump() << "\n  expected " << nlohmann::json(expected).dump()
                    << "\n  got      " << nlohmann::json(got).dump();
    }
  }
  EXPECT_GT(cases, 300);
  EXPECT_EQ(failures, 0);
}

TEST(WordPiece, SpecialTokensFrameTheText) {
  auto tok = bge();
  // [CLS] text [SEP], as llama.cpp and BertTokenizer add them.
  EXPECT_EQ(tok->encode("Hello world", true, false), (std::vector<int32_t>{101, 7592, 2088, 102}));
  EXPECT_EQ(tok->encode("", true, false), (std::vector<int32_t>{101, 102}));
  // Special-token text is a token only with parse_special; otherwise it is ordinary text.
  EXPECT_EQ(tok->encode("a [SEP] b", false, true), (std::vector<int32_t>{1037, 102, 1038}));
  EXPECT_EQ(tok->encode("[SEP]", false, false), (std::vector<int32_t>{1031, 19802, 1033}));
}

TEST(WordPiece, UncoverableWordIsOneUnknown) {
  auto tok = bge();
  // Every character of "🦙" has no piece: the whole word, not each byte, becomes [UNK].
  EXPECT_EQ(tok->encode("🦙🦙 ok", false, false), (std::vector<int32_t>{100, 7929}));
}

TEST(WordPiece, DecodeGivesTheNormalizedWords) {
  auto tok = bge();
  // Lossy by design: lowercase, accents gone, punctuation its own word, one space between words.
  const auto ids = tok->encode("Führer und naïve Café, 3.14!", true, false);
  EXPECT_EQ(tok->decode(ids), "fuhrer und naive cafe , 3 . 14 !");
  EXPECT_EQ(tok->token_to_piece(101, /*special=*/true), "[CLS]");
  EXPECT_EQ(tok->token_to_piece(17875), "hrer");  // a continuation piece has no leading space
}

TEST(UnicodeProps, CanonicalDecomposition) {
  auto nfd = [](uint32_t c) {
    std::vector<uint32_t> out;
    unicode::append_nfd(c, out);
    return out;
  };
  EXPECT_EQ(nfd('a'), (std::vector<uint32_t>{'a'}));
  EXPECT_EQ(nfd(0xE9), (std::vector<uint32_t>{'e', 0x301}));                // é
  EXPECT_EQ(nfd(0x1EC7), (std::vector<uint32_t>{'e', 0x323, 0x302}));       // ệ: two marks, canonical order
  EXPECT_EQ(nfd(0xD55C), (std::vector<uint32_t>{0x1112, 0x1161, 0x11AB}));  // 한: L V T jamo
  EXPECT_EQ(nfd(0xAC00), (std::vector<uint32_t>{0x1100, 0x1161}));          // 가: no trailing consonant
  EXPECT_EQ(nfd(0xD7A3), (std::vector<uint32_t>{0x1112, 0x1175, 0x11C2}));  // last syllable
  EXPECT_EQ(nfd(0xF900), (std::vector<uint32_t>{0x8C48}));                  // CJK compatibility ideograph
  EXPECT_EQ(nfd(0xFB01), (std::vector<uint32_t>{0xFB01}));                  // ﬁ: compatibility only, not NFD
}

TEST(UnicodeProps, Categories) {
  EXPECT_TRUE(unicode::is_control(0x07));
  EXPECT_TRUE(unicode::is_control(0x200B));  // zero width space (Cf)
  EXPECT_TRUE(unicode::is_control(0xE000));  // private use
  EXPECT_FALSE(unicode::is_control(0x378));  // unassigned stays
  EXPECT_FALSE(unicode::is_control('A'));
  EXPECT_TRUE(unicode::is_punctuation(','));
  EXPECT_TRUE(unicode::is_punctuation(0x3001));  // 、
  EXPECT_TRUE(unicode::is_punctuation(0x2014));  // —
  EXPECT_FALSE(unicode::is_punctuation('$'));
  EXPECT_TRUE(unicode::is_ascii_symbol('$'));
  EXPECT_FALSE(unicode::is_ascii_symbol(0x20AC));  // € is a symbol, but not ASCII
  EXPECT_TRUE(unicode::is_nonspacing_mark(0x301));
  EXPECT_FALSE(unicode::is_nonspacing_mark('e'));
  EXPECT_TRUE(unicode::is_whitespace(0x3000));
  EXPECT_TRUE(unicode::is_whitespace(0x0B));
  EXPECT_FALSE(unicode::is_whitespace(0x200B));
  EXPECT_TRUE(unicode::is_cjk_ideograph(0x4F60));
  EXPECT_FALSE(unicode::is_cjk_ideograph(0x3042));  // hiragana
  EXPECT_EQ(unicode::to_lower('A'), uint32_t{'a'});
  EXPECT_EQ(unicode::to_lower(0xC4), 0xE4u);    // Ä
  EXPECT_EQ(unicode::to_lower(0x391), 0x3B1u);  // Α
  EXPECT_EQ(unicode::to_lower(0x410), 0x430u);  // А
  EXPECT_EQ(unicode::to_lower('a'), uint32_t{'a'});
  EXPECT_EQ(unicode::to_lower(0x10FFFF), 0x10FFFFu);
}

}  // namespace
}  // namespace kvserve
