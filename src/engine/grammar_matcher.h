#pragma once
// Constrained decoding: where a sequence stands in its Grammar (json_grammar.h), and which tokens may come
// next. A pushdown recognizer over the reply's bytes: a stack of frames (object, array, string, number,
// literal, fixed text), each with its own small state. To test a token, its bytes are fed to a trial view of
// the stack that copies only the frames it changes (most tokens fail on their first byte), so a step's mask
// costs a few hundred trials at a structural point, and inside a string only the tokens holding a quote,
// a backslash or a control byte need one (the rest are string text as they are). Where a union's branches
// start alike, the text is read several ways at once (one stack each) until it tells them apart.
#include <array>
#include <bitset>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/json_grammar.h"
#include "model/tokenizer.h"

namespace kvserve {

// Each token's bytes as the reply shows them, built once per vocabulary and shared by every matcher.
class GrammarTokenTable {
 public:
  explicit GrammarTokenTable(const Tokenizer& tokenizer);
  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  // Usable as JSON string text just as it is, from a character boundary: no quote, backslash or control
  // byte, strict UTF-8 (its last character may be cut).
  bool plain(int32_t id) const { return plain_[static_cast<size_t>(id)] != 0; }
  const std::vector<uint8_t>& plain_flags() const { return plain_; }
  // The tokens with text that are not plain (nor end of generation): the ones a string needs to check.
  const std::vector<int32_t>& unplain() const { return unplain_; }
  // Raw text (a Regex node's) as it is: any token with text whose bytes are strict UTF-8 from a character
  // boundary (its last character may be cut), quotes, backslashes and control bytes included; and the
  // other tokens with text.
  const std::vector<uint8_t>& raw_flags() const { return raw_; }
  const std::vector<int32_t>& unraw() const { return unraw_; }
  uint8_t first_byte(int32_t id) const { return first_byte_[static_cast<size_t>(id)]; }
  // 1 for each token with text that does not end generation.
  const std::vector<uint8_t>& text_flags() const { return text_; }
  // The tokens with text whose bytes hold `byte` (built at the first call for that byte; thread-safe).
  const std::vector<int32_t>& tokens_containing(uint8_t byte) const;
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_ids_; }
  bool end_of_generation(int32_t id) const { return eog_[static_cast<size_t>(id)] != 0; }

  // The tokens' bytes as a trie, so a mask tests each shared prefix once and drops a whole subtree at the
  // first byte the grammar refuses. Node 0 is the root; 0 also ends a child or sibling list.
  struct TrieNode {
    uint32_t first_child = 0;
    uint32_t next_sibling = 0;
    int32_t token = -1;  // a token whose bytes end here (others with the same bytes: same_bytes_next)
    uint8_t byte = 0;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  int32_t same_bytes_next(int32_t id) const { return same_bytes_next_[static_cast<size_t>(id)]; }

 private:
  std::vector<std::string> bytes_;
  std::vector<uint8_t> plain_, raw_, eog_, first_byte_, text_;
  mutable std::array<std::once_flag, 256> containing_once_;
  mutable std::array<std::vector<int32_t>, 256> containing_;
  std::vector<int32_t> unplain_, unraw_, eog_ids_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> same_bytes_next_;
};

class GrammarMatcher {
 public:
  static constexpr size_t kMaxStacks = 16;

  // `shown`: control tokens whose text the reply shows (StreamDecoder::show_tokens), so the grammar sees
  // their text too (a Mistral tool call's [TOOL_CALLS]).
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, const GrammarTokenTable& table,
                 const std::vector<std::pair<int32_t, std::string>>& shown = {});

  // Sets the logits of every token that cannot come next to -infinity (ids past the table too). An
  // end-of-generation token may come only where the text may end. Returns how many tokens stay allowed.
  int64_t mask(float* logits, int32_t n_vocab) const;
  // The mask; where no token can come (a grammar the vocabulary cannot spell), `eos` alone, so the text ends.
  void mask_or_end(float* logits, int32_t n_vocab, int32_t eos) const {
    if (mask(logits, n_vocab) == 0 && eos >= 0 && eos < n_vocab) logits[eos] = 0.0f;
  }
  // Moves past a token the mask allowed; false (and no change) for one it did not.
  bool accept(int32_t id);
  // The text so far is a whole value: the reply may end here.
  bool can_end() const;
  // Nothing more can follow: the reply must end here.
  bool done() const;

  struct Frame {
    int32_t node = 0;  // -2: an object's free key (a plain string)
    uint8_t state = 0;
    uint8_t ws = 0;      // whitespace bytes in a row
    uint16_t pos = 0;    // literal / key / fixed-text position
    uint32_t count = 0;  // array items, string characters, number bytes
    uint64_t set = 0;    // literal or key candidates
    int32_t next = 0;    // object: the next property that may come; sequence: the current part; pattern: its
                         // state; bounded number: fraction digits
    int32_t sub = 0;     // object: the property being written; string: \u digits left; bounded number: 1 if
                         // negative
    uint64_t value = 0;  // pattern: the code point being read; bounded number: the fraction's digits
    bool operator==(const Frame&) const = default;
  };

 private:
  const std::string& token_bytes(int32_t id) const;
  [[gnu::noinline]] void mask_looping_text(const std::bitset<128>& leaving, std::vector<uint8_t>& allowed) const;
  // Whether some stack takes the bytes; the stacks after them into `commit`.
  bool feed_token(const std::string& bytes, std::vector<std::vector<Frame>>* commit) const;

  std::shared_ptr<const Grammar> grammar_;
  const GrammarTokenTable& table_;
  std::vector<std::pair<int32_t, std::string>> shown_;
  // One stack per reading of the text so far: more than one only where a union's branches start alike and
  // the text has not yet told them apart (at most kMaxStacks; a reading past that is dropped).
  std::vector<std::vector<Frame>> stacks_;
  // For a string with a pattern (its node and the pattern's state): the plain tokens that keep the text
  // inside the string, which no other part of the stack changes. Shared by a matcher's copies (a request's
  // choices), whose masks may run on several threads at once.
  struct PatternCache {
    std::mutex mu;
    std::map<std::pair<int32_t, int32_t>, std::shared_ptr<const std::vector<uint8_t>>> inside;
  };
  std::shared_ptr<PatternCache> pattern_cache_ = std::make_shared<PatternCache>();
};

}  // namespace kvserve
