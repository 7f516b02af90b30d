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

  // llama.cpp treats a whole pre-tokenized word that is itself a token as that token, skipping merges,
  // for these pre-tokenizers (Llama-3 family).
  bool ignore_merges() const { return ignore_merges_; }

  // The regex sources llama.cpp lists for `pre` (before PCRE2 adaptation); empty for an unknown name.
  static std::vector<std::string> regexes_for(const std::string& pre, bool* ignore_merges = nullptr);

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
  bool ignore_merges_ = false;
};

}  // namespace kvserve
