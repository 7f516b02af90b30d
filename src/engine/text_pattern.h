#pragma once
// A regular expression (the ECMAScript subset JSON Schema's `pattern` and vLLM's guided_regex use) as a
// deterministic automaton over Unicode code points, for the GrammarMatcher to step one character at a time.
// Only states from which a match can still be completed are kept, so a constrained reply never walks into a
// dead end.
//
// Supported: literals, `.`, classes `[...]` / `[^...]` with ranges, the escapes \d \D \w \W \s \S \t \n \r \f
// \v \0 \xHH \uHHHH \u{H...} and escaped punctuation, groups `(...)` `(?:...)` `(?<name>...)`, alternation,
// the quantifiers * + ? {n} {n,} {n,m} (lazy ones too: the same language), and `^` / `$` at the start / end of
// a top-level alternative. Refused with an Error naming them: lookaround, backreferences, word boundaries,
// inline flags, anchors elsewhere. Surrogate code points are never matched (they have no UTF-8 form).
#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvserve {

class TextPattern {
 public:
  // How a pattern applies to a whole text: JSON Schema's `pattern` searches (a top-level alternative without
  // `^` / `$` may have any text before / after it); guided_regex matches the whole text.
  enum class Mode { Search, FullMatch };
  // Throws Error naming what it cannot compile. `lengths`: also work out which lengths of text each state
  // can still be completed in (can_finish), for strings with minLength / maxLength.
  static std::shared_ptr<const TextPattern> compile(const std::string& pattern, Mode mode, bool lengths = false);

  // Text up to and with the first `end`, none of `forbidden` in it (ASCII words): a value a tool-call
  // parser reads up to its closing tag, where it would also stop at the other tags.
  static std::shared_ptr<const TextPattern> text_until(const std::string& end,
                                                       const std::vector<std::string>& forbidden);

  int32_t start() const { return start_; }
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  // The state after code point `cp`, or -1.
  int32_t next(int32_t state, uint32_t cp) const;
  bool has_edges(int32_t state) const {
    return first_edge_[static_cast<size_t>(state) + 1] > first_edge_[static_cast<size_t>(state)];
  }
  size_t states() const { return accepting_.size(); }

  // Lengths (in code points) the text can be completed in from a state: those below kLengthCap exactly;
  // `longer`: some length of at least kLengthCap. Only with compile(..., lengths = true).
  static constexpr uint32_t kLengthCap = 1024;
  // Whether, from `state`, the text can end after more code points within [at_least, at_most] (at_most
  // UINT32_MAX: no bound; otherwise below kLengthCap).
  bool can_finish(int32_t state, uint32_t at_least, uint32_t at_most) const;
  // Whether some code point within [lo, hi] leads to a state that can finish within the bounds after it.
  bool can_take(int32_t state, uint32_t lo, uint32_t hi, uint32_t at_least, uint32_t at_most) const;
  // Where a state goes back to itself on every code point but a few ASCII ones (free text, until a tag
  // starts): those bytes; null where it does not.
  const std::bitset<128>* leaves_on(int32_t state) const {
    return loops_[static_cast<size_t>(state)] ? &leave_[static_cast<size_t>(state)] : nullptr;
  }
  // The code point ranges out of a state: for a grammar's first bytes.
  struct Edge {
    uint32_t lo = 0, hi = 0;
    int32_t to = -1;
  };
  std::vector<Edge> edges(int32_t state) const {
    return {edges_.begin() + first_edge_[static_cast<size_t>(state)],
            edges_.begin() + first_edge_[static_cast<size_t>(state) + 1]};
  }

 private:
  struct RawState {
    std::vector<Edge> edges;
    bool accepting = false;
  };
  // The automaton from its states (0 the start): dead ends dropped, and lengths worked out if asked.
  static std::shared_ptr<const TextPattern> from_states(std::vector<RawState> dfa, const std::string& pattern,
                                                        bool lengths);

  int32_t start_ = 0;
  std::vector<uint8_t> accepting_;
  std::vector<uint32_t> first_edge_;  // per state, into edges_ (sorted by lo, disjoint); one past the last too
  std::vector<Edge> edges_;
  std::vector<std::bitset<kLengthCap>> lengths_;
  std::vector<uint8_t> loops_;
  std::vector<std::bitset<128>> leave_;
  std::vector<uint8_t> longer_;
};

}  // namespace kvserve
