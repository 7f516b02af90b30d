// BPE as llama.cpp's llm_tokenizer_bpe does it: pre-tokenize with the vocabulary's regexes, map every
// byte of a word to its GPT-2 stand-in symbol, then repeatedly merge the adjacent pair with the lowest
// merge rank (leftmost on ties) and look the resulting symbols up as tokens. SentencePiece-style BPE
// vocabularies (Gemma 4) instead write spaces as U+2581, merge raw UTF-8 and fall back to byte tokens.
#include <memory>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/pretokenizer.h"
#include "model/tokenizer_impl.h"
#include "model/unicode.h"

namespace kvserve {

namespace {

class BpeTokenizer final : public VocabTokenizer {
 public:
  explicit BpeTokenizer(Vocab vocab) : VocabTokenizer(std::move(vocab)), pre_tokenizer_(vocab_.pre) {
    merge_rank_.reserve(vocab_.merges.size());
    for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
      const std::string& merge = vocab_.merges[rank];
      // llama.cpp splits at the first space after the first character, so a merge may start with one.
      const size_t space = merge.find(' ', 1);
      if (space == std::string::npos) continue;
      merge_rank_.emplace(merge_key(std::string_view(merge).substr(0, space), std::string_view(merge).substr(space + 1)),
                          static_cast<int>(rank));
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int32_t> out;
    if (add_special && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
    for (const TextFragment& fragment : partition_special(text, parse_special)) {
      if (fragment.is_token()) {
        out.push_back(fragment.token);
      } else {
        tokenize_text(text.substr(fragment.offset, fragment.length), out);
      }
    }
    if (add_special && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
    return out;
  }

 protected:
  std::string normal_piece(const std::string& token_text) const override {
    if (!pre_tokenizer_.style().byte_level) return unescape_spaces(token_text);
    std::string piece;
    piece.reserve(token_text.size());
    for (const uint32_t cpt : unicode::decode_utf8(token_text)) {
      const int byte = unicode::symbol_to_byte(cpt);
      if (byte >= 0) {
        piece += static_cast<char>(byte);
      } else {
        // Not a byte-level symbol (hand-made vocabularies): keep the character itself.
        unicode::append_utf8(piece, cpt);
      }
    }
    return piece;
  }

 private:
  static std::string merge_key(std::string_view left, std::string_view right) {
    std::string key;
    key.reserve(left.size() + right.size() + 1);
    key.append(left);
    key += '\0';  // never inside a token text, so the pair stays unambiguous
    key.append(right);
    return key;
  }

  int merge_rank(std::string_view left, std::string_view right, std::string& scratch) const {
    scratch.assign(left);
    scratch += '\0';
    scratch.append(right);
    const auto it = merge_rank_.find(std::string_view(scratch));
    return it == merge_rank_.end() ? -1 : it->second;
  }

  struct Symbol {
    int prev;
    int next;
    size_t offset;  // into the byte-encoded word
    size_t length;  // 0 once merged into its left neighbour
  };
  struct Bigram {
    int left;
    int right;
    int rank;
    size_t length;
    size_t left_length;  // to detect a stale entry: both sides must still have these lengths
  };
  struct BigramOrder {
    // Priority queue top = lowest rank, then leftmost.
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };

  // A byte of a symbol that is no token: its GPT-2 stand-in, or "<0xXX>" without byte-level symbols.
  int32_t byte_token(uint8_t byte) const {
    if (pre_tokenizer_.style().byte_level) {
      const char c = static_cast<char>(byte);
      return text_to_token(std::string_view(&c, 1));
    }
    static constexpr char kHex[] = "0123456789ABCDEF";
    const char name[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
    return text_to_token(std::string_view(name, sizeof(name)));
  }

  void tokenize_text(std::string_view raw_text, std::vector<int32_t>& out) const {
    const PreTokenizerStyle& style = pre_tokenizer_.style();
    std::string escaped;
    std::string_view text = raw_text;
    if (style.escape_spaces) {
      escaped.reserve(raw_text.size());
      for (const char c : raw_text) {
        if (c == ' ') {
          escaped += "\xE2\x96\x81";
        } else {
          escaped += c;
        }
      }
      text = escaped;
    }
    std::string word;
    std::string scratch;
    std::vector<Symbol> symbols;
    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;

    for (const std::string& raw_word : pre_tokenizer_.split(text)) {
      if (style.byte_level) {
        word.clear();
        for (const char c : raw_word) word += unicode::byte_to_symbol(static_cast<uint8_t>(c));
      } else {
        word = raw_word;
      }

      if (vocab_.ignore_merges.value_or(style.ignore_merges) ||
          (style.newline_runs_whole && word.find_first_not_of('\n') == std::string::npos)) {
        const int32_t whole = text_to_token(word);
        if (whole >= 0) {
          out.push_back(whole);
          continue;
        }
      }

      symbols.clear();
      for (size_t offset = 0; offset < word.size();) {
        const size_t length = std::min(unicode::utf8_len(static_cast<uint8_t>(word[offset])), word.size() - offset);
        const int index = static_cast<int>(symbols.size());
        symbols.push_back({index - 1, offset + length == word.size() ? -1 : index + 1, offset, length});
        offset += length;
      }
      auto add_bigram = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const std::string_view left_text(word.data() + symbols[left].offset, symbols[left].length);
        const std::string_view right_text(word.data() + symbols[right].offset, symbols[right].length);
        const int rank = merge_rank(left_text, right_text, scratch);
        if (rank < 0) return;
        queue.push({left, right, rank, left_text.size() + right_text.size(), left_text.size()});
      };
      for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_bigram(i - 1, i);

      while (!queue.empty()) {
        const Bigram bigram = queue.top();
        queue.pop();
        Symbol& left = symbols[bigram.left];
        Symbol& right = symbols[bigram.right];
        // Stale entry: llama.cpp compares the pair's text with the symbols' current text. Symbols only
        // grow rightwards from fixed offsets, so equal lengths (and adjacency) mean equal text.
        if (left.length == 0 || right.length == 0 || left.next != bigram.right ||
            left.length != bigram.left_length || left.length + right.length != bigram.length) {
          continue;
        }
        left.length += right.length;
        right.length = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = bigram.left;
        add_bigram(left.prev, bigram.left);
        add_bigram(bigram.left, left.next);
      }

      for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
        const std::string_view symbol_text(word.data() + symbols[i].offset, symbols[i].length);
        const int32_t id = text_to_token(symbol_text);
        if (id >= 0) {
          out.push_back(id);
          continue;
        }
        // No token for the merged symbol: each byte of its text on its own, skipping any that are not
        // tokens either (llama.cpp does the same).
        for (const char c : symbol_text) {
          const int32_t byte_id = byte_token(static_cast<uint8_t>(c));
          if (byte_id >= 0) out.push_back(byte_id);
        }
      }
    }
  }

  PreTokenizer pre_tokenizer_;
  TokenIdMap merge_rank_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab) { return std::make_unique<BpeTokenizer>(std::move(vocab)); }

}  // namespace kvserve
