// WordPiece, as llama.cpp's llm_tokenizer_wpm applies it to BERT vocabularies converted to GGUF (word
// starts carry "▁", continuations are bare, where the original vocab.txt had "##"):
//   1. pre-tokenize as Hugging Face's BertNormalizer + BertPreTokenizer (which made llama.cpp's reference
//      outputs): decompose (NFD) and drop nonspacing marks, so accents go; lowercase; drop NUL, U+FFFD
//      and control characters; split at whitespace; make every punctuation mark, ASCII symbol and CJK
//      ideograph a word of its own. (llama.cpp keeps only the first code point of each decomposition:
//      the same for accented letters, but it loses the vowels of Hangul syllables.)
//   2. each word, prefixed with "▁", is covered greedily by the longest vocabulary entry at each byte
//      position; a word with any position no entry covers becomes one [UNK].
#include <algorithm>
#include <string>
#include <vector>

#include "model/tokenizer_impl.h"
#include "model/unicode.h"

namespace kvserve {

namespace {

constexpr std::string_view kWordPrefix = "\xE2\x96\x81";  // U+2581 "▁"

class WpmTokenizer final : public VocabTokenizer {
 public:
  explicit WpmTokenizer(Vocab vocab) : VocabTokenizer(std::move(vocab)) {
    for (const std::string& t : vocab_.tokens) max_token_bytes_ = std::max(max_token_bytes_, t.size());
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int32_t> out;
    if (add_special && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
    for (const TextFragment& fragment : partition_special(text, parse_special)) {
      if (fragment.is_token()) {
        out.push_back(fragment.token);
        continue;
      }
      for (const std::string& word : split_words(text.substr(fragment.offset, fragment.length))) {
        tokenize_word(word, out);
      }
    }
    if (add_special && vocab_.add_sep && vocab_.sep_id >= 0) out.push_back(vocab_.sep_id);
    return out;
  }

 protected:
  std::string normal_piece(const std::string& token_text) const override { return unescape_spaces(token_text); }

 private:
  static std::vector<std::string> split_words(std::string_view text) {
    std::vector<uint32_t> cpts;
    for (const uint32_t original : unicode::decode_utf8(text)) unicode::append_nfd(original, cpts);
    std::vector<std::string> words(1);
    for (const uint32_t cpt : cpts) {
      // Tab, LF and CR are whitespace; every other control character (VT and FF too, though Unicode
      // calls them white space) is dropped, as BertNormalizer's clean-up does.
      const bool whitespace_control = cpt == '\t' || cpt == '\n' || cpt == '\r';
      if (cpt == 0 || cpt == 0xFFFD || (unicode::is_control(cpt) && !whitespace_control) ||
          unicode::is_nonspacing_mark(cpt)) {
        continue;
      }
      if (unicode::is_whitespace(cpt)) {
        if (!words.back().empty()) words.emplace_back();
        continue;
      }
      const uint32_t lower = unicode::to_lower(cpt);
      if (unicode::is_punctuation(cpt) || unicode::is_ascii_symbol(cpt) || unicode::is_cjk_ideograph(cpt)) {
        if (!words.back().empty()) words.emplace_back();
        unicode::append_utf8(words.back(), lower);
        words.emplace_back();
      } else {
        unicode::append_utf8(words.back(), lower);
      }
    }
    if (words.back().empty()) words.pop_back();
    return words;
  }

  void tokenize_word(const std::string& word, std::vector<int32_t>& out) const {
    const std::string prefixed = std::string(kWordPrefix) + word;
    const size_t n = prefixed.size();
    const size_t start = out.size();
    for (size_t i = 0; i < n;) {
      size_t matched = 0;
      for (size_t j = std::min(n, i + max_token_bytes_); j > i; --j) {
        const int32_t id = text_to_token(std::string_view(prefixed).substr(i, j - i));
        if (id >= 0) {
          out.push_back(id);
          matched = j - i;
          break;
        }
      }
      if (matched == 0) {
        out.resize(start);  // one uncovered position makes the whole word unknown
        break;
      }
      i += matched;
    }
    if (out.size() == start && vocab_.unk_id >= 0) out.push_back(vocab_.unk_id);
  }

  size_t max_token_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_wpm_tokenizer(Vocab vocab) { return std::make_unique<WpmTokenizer>(std::move(vocab)); }

}  // namespace kvserve
