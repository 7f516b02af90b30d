// SentencePiece-style BPE over vocabulary scores, as llama.cpp's llm_tokenizer_spm (and llama2.c's
// encode) do it: spaces become "▁", the text splits into UTF-8 characters, and the adjacent pair whose
// concatenation is the highest-scoring token merges first (leftmost on ties) until nothing merges.
// Symbols that are not tokens fall back to <0xXX> byte tokens.
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/tokenizer_impl.h"
#include "model/unicode.h"

namespace kvserve {

namespace {

constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581 "▁"

class SpmTokenizer final : public VocabTokenizer {
 public:
  explicit SpmTokenizer(Vocab vocab) : VocabTokenizer(std::move(vocab)) {
    for (int byte = 0; byte < 256; ++byte) {
      static const char* kHex = "0123456789ABCDEF";
      const char name[7] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>', 0};
      int32_t id = text_to_token(name);
      // Vocabularies without byte tokens may still hold the byte itself as a one-character token.
      if (id < 0) id = text_to_token(std::string(1, static_cast<char>(byte)));
      byte_token_[byte] = id;
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int32_t> out;
    if (add_special && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
    // The dummy prefix goes before text at the start and after every special token, independent of
    // add_special (llama.cpp's behaviour, which its tokenizer tests pin down).
    bool previous_was_special = true;
    for (const TextFragment& fragment : partition_special(text, parse_special)) {
      if (fragment.is_token()) {
        out.push_back(fragment.token);
        previous_was_special = true;
        continue;
      }
      std::string escaped;
      escaped.reserve(fragment.length + 8);
      if (vocab_.add_space_prefix && previous_was_special) escaped += kEscapedSpace;
      for (const char c : text.substr(fragment.offset, fragment.length)) {
        if (c == ' ') {
          escaped += kEscapedSpace;
        } else {
          escaped += c;
        }
      }
      tokenize_text(escaped, out);
      previous_was_special = false;
    }
    if (add_special && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
    return out;
  }

 protected:
  std::string normal_piece(const std::string& token_text) const override { return unescape_spaces(token_text); }

 private:
  struct Symbol {
    int prev;
    int next;
    size_t offset;  // into the escaped text
    size_t length;  // 0 once merged into its left neighbour
  };
  struct Bigram {
    int left;
    int right;
    float score;
    size_t length;
  };
  struct BigramOrder {
    // Priority queue top = highest score, then leftmost.
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  struct Session {
    const SpmTokenizer& tok;
    const std::string& text;
    std::vector<Symbol> symbols;
    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;

    void try_add_bigram(int left, int right) {
      if (left < 0 || right < 0) return;
      const std::string_view pair_text(text.data() + symbols[left].offset,
                                       symbols[left].length + symbols[right].length);
      const int32_t id = tok.text_to_token(pair_text);
      if (id < 0) return;
      const float score = static_cast<size_t>(id) < tok.vocab_.scores.size() ? tok.vocab_.scores[id] : 0.0f;
      queue.push({left, right, score, pair_text.size()});
    }

    // llama.cpp keeps a map from merged text back to its two halves to split up symbols that are not
    // tokens, but a symbol is only ever merged into a token, so the only non-tokens left at the end are
    // single characters that never merged (no pair text is one character): those become byte tokens.
    void emit(const Symbol& symbol, std::vector<int32_t>& out) const {
      const std::string_view symbol_text(text.data() + symbol.offset, symbol.length);
      const int32_t id = tok.text_to_token(symbol_text);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
      for (const char c : symbol_text) {
        const int32_t byte_id = tok.byte_token_[static_cast<uint8_t>(c)];
        if (byte_id < 0) fail("SPM vocabulary has no byte token for 0x{:02X}", static_cast<uint8_t>(c));
        out.push_back(byte_id);
      }
    }
  };

  void tokenize_text(const std::string& text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    Session session{*this, text, {}, {}};
    auto& symbols = session.symbols;
    symbols.reserve(text.size());
    for (size_t offset = 0; offset < text.size();) {
      const size_t length = std::min(unicode::utf8_len(static_cast<uint8_t>(text[offset])), text.size() - offset);
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({index - 1, offset + length == text.size() ? -1 : index + 1, offset, length});
      offset += length;
    }
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) session.try_add_bigram(i - 1, i);

    while (!session.queue.empty()) {
      const Bigram bigram = session.queue.top();
      session.queue.pop();
      Symbol& left = symbols[bigram.left];
      Symbol& right = symbols[bigram.right];
      // Stale entry: one side already merged elsewhere.
      if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) continue;
      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = bigram.left;
      session.try_add_bigram(left.prev, bigram.left);
      session.try_add_bigram(bigram.left, left.next);
    }
    for (int i = 0; i != -1; i = symbols[i].next) session.emit(symbols[i], out);
  }

  int32_t byte_token_[256];
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab) { return std::make_unique<SpmTokenizer>(std::move(vocab)); }

}  // namespace kvserve
