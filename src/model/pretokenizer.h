#pragma once
// Byte-level BPE pre-tokenization as llama.cpp's unicode_regex_split does it: a list of regexes per
// pre-tokenizer name, each applied in turn inside every piece the previous one produced; a piece is a
// regex match or the unmatched text between matches. Regexes run on PCRE2 (UTF + Unicode properties,
// JIT when available), compiled once per PreTokenizer.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve {

// How llama.cpp's BPE session treats the text and the words of a pre-tokenizer.
struct PreTokenizerStyle {
  // A whole word that is itself a token is that token, skipping merges (Llama-3 family).
  bool ignore_merges = false;
  // Words are mapped byte by byte to GPT-2's stand-in symbols. When false (SentencePiece-style BPE), they
  // stay raw UTF-8 and a byte without a token of its own falls back to its "<0xXX>" token.
  bool byte_level = true;
  // ' ' becomes U+2581 before splitting, as SentencePiece's normalizer writes it (Gemma 4).
  bool escape_spaces = false;
  // A word of newlines only that is a token is that token (llama.cpp's Gemma 4 fix, PR 21343).
  bool newline_runs_whole = false;
};

class PreTokenizer {
 public:
  // Throws Error naming `pre` when llama.cpp does not know it.
  explicit PreTokenizer(const std::string& pre);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Words of `text` (raw UTF-8, malformed bytes replaced by U+FFFD), in order; concatenated they give
  // the sanitized text back.
  std::vector<std::string> split(std::string_view text) const;

  const PreTokenizerStyle& style() const { return style_; }

  // The regex sources llama.cpp lists for `pre` (before PCRE2 adaptation), and its style; empty for an
  // unknown name.
  static std::vector<std::string> regexes_for(const std::string& pre, PreTokenizerStyle* style = nullptr);

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
  PreTokenizerStyle style_;
};

}  // namespace kvserve
