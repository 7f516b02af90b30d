#pragma once
// Internals shared by the SPM, BPE and WPM tokenizers (not part of the public tokenizer.h interface): token
// lookup by text, special-token partitioning (llama.cpp's tokenizer_st_partition), EOG set, pieces.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "model/tokenizer.h"

namespace kvserve {

// Transparent hashing so lookups by string_view do not build a std::string.
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringViewHash, std::equal_to<>>;

// A run of input text still to tokenize, or a special token already found in it.
struct TextFragment {
  int32_t token = -1;  // >= 0: a special token
  size_t offset = 0;   // raw text: byte range in the input
  size_t length = 0;
  bool is_token() const { return token >= 0; }
};

class VocabTokenizer : public Tokenizer {
 public:
  std::string token_to_piece(int32_t id, bool special = false) const override;
  bool is_eog(int32_t id) const override;
  std::vector<int32_t> eog_ids() const override;

 protected:
  explicit VocabTokenizer(Vocab vocab);

  TokenType type_of(int32_t id) const {
    return static_cast<size_t>(id) < vocab_.token_types.size() ? vocab_.token_types[id] : TokenType::Normal;
  }
  // -1 when `text` is not a token.
  int32_t text_to_token(std::string_view text) const {
    const auto it = token_to_id_.find(text);
    return it == token_to_id_.end() ? -1 : it->second;
  }
  // Splits `text` around occurrences of special-token text, longest tokens first. Control and unknown
  // tokens are recognized only with parse_special; user-defined ones always (as llama.cpp does).
  std::vector<TextFragment> partition_special(std::string_view text, bool parse_special) const;

  // Text of a normal token as bytes: SPM unescapes "▁", byte-level BPE maps symbols back to bytes.
  virtual std::string normal_piece(const std::string& token_text) const = 0;

  TokenIdMap token_to_id_;

 private:
  std::vector<int32_t> special_tokens_longest_first_;
  std::unordered_set<int32_t> eog_ids_;
};

// Token text with every "▁" (U+2581, how SentencePiece and GGUF WordPiece vocabularies write a space)
// turned back into ' '.
std::string unescape_spaces(std::string_view token_text);

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab);
std::unique_ptr<Tokenizer> make_wpm_tokenizer(Vocab vocab);

}  // namespace kvserve
