#include "engine/text_pattern.h"

#include <algorithm>
#include <array>
#include <map>
#include <utility>

#include "core/error.h"

namespace kvserve {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kInfinite = UINT32_MAX;
constexpr uint32_t kMaxRepeat = 1000;
constexpr size_t kMaxNfaStates = 50000;
constexpr size_t kMaxDfaStates = 4000;
constexpr size_t kMaxDfaEdges = 200000;
constexpr int kMaxNesting = 64;
constexpr size_t kMaxWork = 4000000;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

// Sorted, merged, without surrogates (they have no UTF-8 form, so no text holds them).
Ranges normalized(Ranges r) {
  Ranges split;
  for (auto [lo, hi] : r) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    if (lo < 0xD800 && hi >= 0xD800) {
      split.emplace_back(lo, 0xD7FF);
      lo = 0xE000;
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      lo = 0xE000;
    }
    if (lo <= hi) split.emplace_back(lo, hi);
  }
  std::sort(split.begin(), split.end());
  Ranges out;
  for (const auto& [lo, hi] : split) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges complement(const Ranges& r) {
  const Ranges n = normalized(r);
  Ranges out;
  uint32_t from = 0;
  for (const auto& [lo, hi] : n) {
    if (lo > from) out.emplace_back(from, lo - 1);
    from = hi + 1;
  }
  if (from <= kMaxCodePoint) out.emplace_back(from, kMaxCodePoint);
  return normalized(out);
}

const Ranges kDigits = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript's WhiteSpace and LineTerminator.
const Ranges kSpace = {{9, 13},          {32, 32},         {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kLineTerminators = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

struct Regex {
  enum class Kind { Set, Cat, Alt, Repeat };
  Kind kind = Kind::Cat;  // an empty Cat matches the empty text
  Ranges set;
  std::vector<Regex> kids;
  uint32_t min = 0, max = 0;
};

Regex set_of(Ranges r) {
  Regex x;
  x.kind = Regex::Kind::Set;
  x.set = normalized(std::move(r));
  return x;
}

std::vector<uint32_t> decode_utf8(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra = c < 0x80                 ? 0
                : c >= 0xC2 && c <= 0xDF ? 1
                : c >= 0xE0 && c <= 0xEF ? 2
                : c >= 0xF0 && c <= 0xF4 ? 3
                                         : -1;
    if (extra < 0 || i + static_cast<size_t>(extra) >= s.size() + (extra == 0 ? 1 : 0))
      fail("the pattern is not valid UTF-8");
    uint32_t cp = extra == 0 ? c : c & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((d & 0xC0) != 0x80) fail("the pattern is not valid UTF-8");
      cp = cp << 6 | (d & 0x3F);
    }
    out.push_back(cp);
    i += static_cast<size_t>(extra) + 1;
  }
  return out;
}

class RegexParser {
 public:
  RegexParser(const std::string& text, TextPattern::Mode mode) : src_(text), p_(decode_utf8(text)), mode_(mode) {}

  Regex parse() {
    Regex top;
    top.kind = Regex::Kind::Alt;
    for (;;) {
      bool start_anchor = false, end_anchor = false;
      if (peek('^')) {
        ++i_;
        start_anchor = true;
      }
      Regex branch = sequence(0, &end_anchor);
      if (mode_ == TextPattern::Mode::Search) {
        Regex wrapped;
        if (!start_anchor) wrapped.kids.push_back(any_text());
        wrapped.kids.push_back(std::move(branch));
        if (!end_anchor) wrapped.kids.push_back(any_text());
        branch = std::move(wrapped);
      }
      top.kids.push_back(std::move(branch));
      if (i_ >= p_.size()) break;
      if (p_[i_] == ')') fail("the pattern '{}' has a ')' without its '('", src_);
      ++i_;  // '|'
    }
    return top;
  }

 private:
  bool peek(uint32_t c) const { return i_ < p_.size() && p_[i_] == c; }

  static Regex any_text() {
    Regex r;
    r.kind = Regex::Kind::Repeat;
    r.min = 0;
    r.max = kInfinite;
    r.kids.push_back(set_of({{0, kMaxCodePoint}}));
    return r;
  }

  [[noreturn]] void unsupported(const char* what) const {
    fail("the pattern '{}' uses {}, which is not supported", src_, what);
  }

  // Items up to '|' or ')' (left for the caller). At the top level a '$' may end it (end_anchor).
  Regex sequence(int depth, bool* end_anchor) {
    if (depth > kMaxNesting) fail("the pattern '{}' nests deeper than {}", src_, kMaxNesting);
    Regex seq;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      const uint32_t c = p_[i_];
      if (c == '$') {
        ++i_;
        if (depth == 0 && (i_ == p_.size() || p_[i_] == '|')) {
          *end_anchor = true;
          break;
        }
        unsupported("'$' other than at the end");
      }
      if (c == '^') unsupported("'^' other than at the start");
      if (c == '*' || c == '+' || c == '?')
        fail("the pattern '{}' has nothing to repeat before '{}'", src_, static_cast<char>(c));
      Regex atom = this->atom(depth);
      quantified(atom);
      seq.kids.push_back(std::move(atom));
    }
    return seq;
  }

  Regex atom(int depth) {
    const uint32_t c = p_[i_++];
    if (c == '(') {
      if (peek('?')) {
        ++i_;
        if (peek(':')) {
          ++i_;
        } else if (peek('<') && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!') {
          while (i_ < p_.size() && p_[i_] != '>') ++i_;
          if (i_ >= p_.size()) fail("the pattern '{}' has an unterminated group name", src_);
          ++i_;
        } else if (peek('=') || peek('!') || peek('<')) {
          unsupported("lookaround");
        } else {
          unsupported("inline flags");
        }
      }
      Regex alt;
      alt.kind = Regex::Kind::Alt;
      for (;;) {
        bool unused = false;
        alt.kids.push_back(sequence(depth + 1, &unused));
        if (i_ >= p_.size()) fail("the pattern '{}' has a '(' without its ')'", src_);
        if (p_[i_++] == ')') break;
      }
      return alt;
    }
    if (c == '.') return set_of(complement(kLineTerminators));
    if (c == '[') return klass();
    if (c == '\\') {
      Ranges r;
      escape(/*in_class=*/false, &r);
      return set_of(std::move(r));
    }
    return set_of({{c, c}});
  }

  // After an atom: *, +, ?, {n}, {n,}, {n,m}, each maybe lazy. A '{' that does not start one is itself.
  void quantified(Regex& atom) {
    if (i_ >= p_.size()) return;
    uint32_t min = 0, max = 0;
    const uint32_t c = p_[i_];
    if (c == '*') {
      min = 0, max = kInfinite, ++i_;
    } else if (c == '+') {
      min = 1, max = kInfinite, ++i_;
    } else if (c == '?') {
      min = 0, max = 1, ++i_;
    } else if (c == '{') {
      size_t j = i_ + 1;
      auto number = [&](uint32_t* out) {
        const size_t from = j;
        uint64_t v = 0;
        while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
          v = std::min<uint64_t>(v * 10 + (p_[j] - '0'), uint64_t{1} << 32);
          ++j;
        }
        *out = static_cast<uint32_t>(std::min<uint64_t>(v, kInfinite - 1));
        return j > from;
      };
      if (!number(&min)) return;
      max = min;
      if (j < p_.size() && p_[j] == ',') {
        ++j;
        if (!number(&max)) max = kInfinite;
      }
      if (j >= p_.size() || p_[j] != '}') return;
      i_ = j + 1;
      if (max != kInfinite && max < min)
        fail("the pattern '{}' has a repeat count {{{},{}}} out of order", src_, min, max);
      if (min > kMaxRepeat || (max != kInfinite && max > kMaxRepeat))
        fail("the pattern '{}' repeats more than {} times", src_, kMaxRepeat);
    } else {
      return;
    }
    if (peek('?')) ++i_;  // lazy: the same texts
    if (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' ||
                           (p_[i_] == '{' && i_ + 1 < p_.size() && p_[i_ + 1] >= '0' && p_[i_ + 1] <= '9')))
      fail("the pattern '{}' repeats a repeat", src_);
    Regex r;
    r.kind = Regex::Kind::Repeat;
    r.min = min;
    r.max = max;
    r.kids.push_back(std::move(atom));
    atom = std::move(r);
  }

  uint32_t hex_digits(size_t n) {
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      if (i_ >= p_.size()) fail("the pattern '{}' has a short hex escape", src_);
      const uint32_t d = p_[i_++];
      const int x = d >= '0' && d <= '9'   ? static_cast<int>(d - '0')
                    : d >= 'a' && d <= 'f' ? static_cast<int>(d - 'a' + 10)
                    : d >= 'A' && d <= 'F' ? static_cast<int>(d - 'A' + 10)
                                           : -1;
      if (x < 0) fail("the pattern '{}' has a bad hex escape", src_);
      v = v << 4 | static_cast<uint32_t>(x);
    }
    return v;
  }

  // After a backslash: the characters it stands for, into r. Returns whether it is a class (\d, \w, ...), which
  // cannot end a range.
  bool escape(bool in_class, Ranges* r) {
    if (i_ >= p_.size()) fail("the pattern '{}' ends with a lone backslash", src_);
    const uint32_t c = p_[i_++];
    switch (c) {
      case 'd':
        *r = kDigits;
        return true;
      case 'D':
        *r = complement(kDigits);
        return true;
      case 'w':
        *r = kWord;
        return true;
      case 'W':
        *r = complement(kWord);
        return true;
      case 's':
        *r = kSpace;
        return true;
      case 'S':
        *r = complement(kSpace);
        return true;
      case 't':
        *r = {{'\t', '\t'}};
        return false;
      case 'n':
        *r = {{'\n', '\n'}};
        return false;
      case 'r':
        *r = {{'\r', '\r'}};
        return false;
      case 'f':
        *r = {{'\f', '\f'}};
        return false;
      case 'v':
        *r = {{'\v', '\v'}};
        return false;
      case '0':
        if (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') unsupported("octal escapes");
        *r = {{0, 0}};
        return false;
      case 'x': {
        const uint32_t v = hex_digits(2);
        *r = {{v, v}};
        return false;
      }
      case 'u': {
        uint32_t v = 0;
        if (peek('{')) {
          ++i_;
          size_t n = 0;
          while (i_ + n < p_.size() && p_[i_ + n] != '}') ++n;
          if (n == 0 || n > 6 || i_ + n >= p_.size()) fail("the pattern '{}' has a bad \\u{{...}} escape", src_);
          v = hex_digits(n);
          ++i_;
        } else {
          v = hex_digits(4);
        }
        if (v > kMaxCodePoint) fail("the pattern '{}' escapes a code point past U+10FFFF", src_);
        *r = {{v, v}};
        return false;
      }
      case 'b':
        if (in_class) {
          *r = {{8, 8}};
          return false;
        }
        unsupported("word boundaries");
      case 'B':
        unsupported("word boundaries");
      case 'c':
        unsupported("control escapes");
      case 'p':
      case 'P':
        unsupported("Unicode property escapes");
      case 'k':
        unsupported("backreferences");
      default:
        if (c >= '1' && c <= '9') unsupported("backreferences");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
          fail("the pattern '{}' has an unknown escape '\\{}'", src_, static_cast<char>(c));
        *r = {{c, c}};  // escaped punctuation (or any other character) stands for itself
        return false;
    }
  }

  // One member of a class: a character or an escape, into r. Returns whether it is a class itself (\d, ...).
  bool class_atom(Ranges* r) {
    if (p_[i_] == '\\') {
      ++i_;
      return escape(/*in_class=*/true, r);
    }
    *r = {{p_[i_], p_[i_]}};
    ++i_;
    return false;
  }

  Regex klass() {
    bool negate = false;
    if (peek('^')) {
      negate = true;
      ++i_;
    }
    Ranges members;
    while (true) {
      if (i_ >= p_.size()) fail("the pattern '{}' has a '[' without its ']'", src_);
      if (p_[i_] == ']') {
        ++i_;
        break;
      }
      Ranges low;
      const bool low_is_class = class_atom(&low);
      if (!low_is_class && i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        Ranges high;
        if (class_atom(&high)) fail("the pattern '{}' has a range ending in a class", src_);
        if (high[0].first < low[0].first) fail("the pattern '{}' has a range out of order", src_);
        members.emplace_back(low[0].first, high[0].first);
        continue;
      }
      members.insert(members.end(), low.begin(), low.end());
    }
    return set_of(negate ? complement(members) : members);
  }

  std::string src_;
  std::vector<uint32_t> p_;
  TextPattern::Mode mode_;
  size_t i_ = 0;
};

// Thompson's construction: each state has epsilon moves and moves on a set of code points.
struct Nfa {
  struct State {
    std::vector<int32_t> eps;
    std::vector<std::pair<int32_t, int32_t>> moves;  // (set index, target)
  };
  std::vector<State> states;
  std::vector<Ranges> sets;

  int32_t add() {
    if (states.size() >= kMaxNfaStates) fail("the pattern is too large");
    states.emplace_back();
    return static_cast<int32_t>(states.size()) - 1;
  }

  // The fragment for `r` starting at `from`; returns its end state.
  int32_t build(const Regex& r, int32_t from) {
    switch (r.kind) {
      case Regex::Kind::Set: {
        const int32_t to = add();
        sets.push_back(r.set);
        states[static_cast<size_t>(from)].moves.emplace_back(static_cast<int32_t>(sets.size()) - 1, to);
        return to;
      }
      case Regex::Kind::Cat: {
        int32_t cur = from;
        for (const Regex& k : r.kids) cur = build(k, cur);
        return cur;
      }
      case Regex::Kind::Alt: {
        const int32_t end = add();
        for (const Regex& k : r.kids) {
          const int32_t s = add();
          states[static_cast<size_t>(from)].eps.push_back(s);
          const int32_t e = build(k, s);
          states[static_cast<size_t>(e)].eps.push_back(end);
        }
        return end;
      }
      case Regex::Kind::Repeat: {
        int32_t cur = from;
        for (uint32_t k = 0; k < r.min; ++k) cur = build(r.kids[0], cur);
        if (r.max == kInfinite) {
          const int32_t loop = add();
          states[static_cast<size_t>(cur)].eps.push_back(loop);
          const int32_t e = build(r.kids[0], loop);
          states[static_cast<size_t>(e)].eps.push_back(loop);
          return loop;
        }
        // The optional copies nest, x(x(x)?)?, each with a way straight to the end: the closure of any state
        // stays small, where a chain of optional copies would make it grow with the count.
        const int32_t end = add();
        for (uint32_t k = r.min; k < r.max; ++k) {
          states[static_cast<size_t>(cur)].eps.push_back(end);
          cur = build(r.kids[0], cur);
        }
        states[static_cast<size_t>(cur)].eps.push_back(end);
        return end;
      }
    }
    return from;
  }

  // The states reachable by epsilon moves. `work` counts the states visited over every call: a request's
  // pattern may not make the compiler work without end.
  std::vector<int32_t> closure(std::vector<int32_t> seeds, size_t* work) {
    if (seen.size() != states.size()) seen.assign(states.size(), 0);
    if (++stamp == 0) {
      std::fill(seen.begin(), seen.end(), 0);
      stamp = 1;
    }
    std::vector<int32_t> out;
    while (!seeds.empty()) {
      const int32_t s = seeds.back();
      seeds.pop_back();
      if (seen[static_cast<size_t>(s)] == stamp) continue;
      seen[static_cast<size_t>(s)] = stamp;
      out.push_back(s);
      for (int32_t t : states[static_cast<size_t>(s)].eps) seeds.push_back(t);
    }
    *work += out.size();
    if (*work > kMaxWork) fail("the pattern is too large (its automaton takes too much work to build)");
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::vector<uint32_t> seen;
  uint32_t stamp = 0;
};

}  // namespace

std::shared_ptr<const TextPattern> TextPattern::compile(const std::string& pattern, Mode mode, bool lengths) {
  const Regex re = RegexParser(pattern, mode).parse();
  Nfa nfa;
  const int32_t nfa_start = nfa.add();
  const int32_t nfa_end = nfa.build(re, nfa_start);

  // Subset construction, with each state's moves split at every range boundary among them.
  struct DfaState {
    std::vector<int32_t> members;
    std::vector<Edge> edges;
    bool accepting = false;
  };  // state 0 is the start
  std::vector<DfaState> dfa;
  std::map<std::vector<int32_t>, int32_t> ids;
  auto intern = [&](std::vector<int32_t> members) {
    auto [it, added] = ids.emplace(members, static_cast<int32_t>(dfa.size()));
    if (added) {
      if (dfa.size() >= kMaxDfaStates)
        fail("the pattern '{}' is too large (more than {} states)", pattern, kMaxDfaStates);
      DfaState d;
      d.accepting = std::binary_search(members.begin(), members.end(), nfa_end);
      d.members = std::move(members);
      dfa.push_back(std::move(d));
    }
    return it->second;
  };
  size_t work = 0;
  intern(nfa.closure({nfa_start}, &work));
  size_t total_edges = 0;
  for (size_t d = 0; d < dfa.size(); ++d) {
    struct Move {
      uint32_t lo, hi;
      int32_t to;
    };
    std::vector<Move> moves;
    std::vector<uint32_t> cuts;
    for (int32_t s : dfa[d].members)
      for (const auto& [set, to] : nfa.states[static_cast<size_t>(s)].moves)
        for (const auto& [lo, hi] : nfa.sets[static_cast<size_t>(set)]) {
          moves.push_back({lo, hi, to});
          cuts.push_back(lo);
          cuts.push_back(hi + 1);
        }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<Edge> edges;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const uint32_t lo = cuts[k], hi = cuts[k + 1] - 1;
      std::vector<int32_t> targets;
      for (const Move& m : moves)
        if (m.lo <= lo && hi <= m.hi) targets.push_back(m.to);
      work += moves.size();
      if (targets.empty()) continue;
      const int32_t to = intern(nfa.closure(std::move(targets), &work));
      if (!edges.empty() && edges.back().to == to && edges.back().hi + 1 == lo) {
        edges.back().hi = hi;
      } else {
        edges.push_back({lo, hi, to});
      }
    }
    total_edges += edges.size();
    if (total_edges > kMaxDfaEdges) fail("the pattern '{}' is too large", pattern);
    dfa[d].edges = std::move(edges);
    dfa[d].members.clear();
    dfa[d].members.shrink_to_fit();
  }

  std::vector<RawState> raw(dfa.size());
  for (size_t d = 0; d < dfa.size(); ++d) {
    raw[d].edges = std::move(dfa[d].edges);
    raw[d].accepting = dfa[d].accepting;
  }
  return from_states(std::move(raw), pattern, lengths);
}

std::shared_ptr<const TextPattern> TextPattern::from_states(std::vector<RawState> dfa, const std::string& pattern,
                                                            bool lengths) {
  // Keep only the states from which the text can still end in a match (state 0 is the start).
  const size_t n = dfa.size();
  std::vector<std::vector<int32_t>> preds(n);
  for (size_t d = 0; d < n; ++d)
    for (const Edge& e : dfa[d].edges) preds[static_cast<size_t>(e.to)].push_back(static_cast<int32_t>(d));
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> queue;
  for (size_t d = 0; d < n; ++d)
    if (dfa[d].accepting) {
      live[d] = 1;
      queue.push_back(static_cast<int32_t>(d));
    }
  while (!queue.empty()) {
    const int32_t s = queue.back();
    queue.pop_back();
    for (int32_t p : preds[static_cast<size_t>(s)])
      if (!live[static_cast<size_t>(p)]) {
        live[static_cast<size_t>(p)] = 1;
        queue.push_back(p);
      }
  }
  if (!live[0]) fail("the pattern '{}' matches no text", pattern);
  std::vector<int32_t> renumber(n, -1);
  int32_t kept = 0;
  for (size_t d = 0; d < n; ++d)
    if (live[d]) renumber[d] = kept++;

  auto out = std::make_shared<TextPattern>();
  out->start_ = renumber[0];
  out->first_edge_.push_back(0);
  for (size_t d = 0; d < n; ++d) {
    if (!live[d]) continue;
    out->accepting_.push_back(dfa[d].accepting ? 1 : 0);
    for (const Edge& e : dfa[d].edges)
      if (live[static_cast<size_t>(e.to)]) out->edges_.push_back({e.lo, e.hi, renumber[static_cast<size_t>(e.to)]});
    out->first_edge_.push_back(static_cast<uint32_t>(out->edges_.size()));
  }

  // States that stay put on every code point but some ASCII ones.
  const size_t kept_states = out->accepting_.size();
  out->loops_.assign(kept_states, 0);
  out->leave_.assign(kept_states, {});
  for (size_t st = 0; st < kept_states; ++st) {
    std::bitset<128> stay;
    uint64_t beyond = 0;  // non-ASCII code points that stay
    for (uint32_t k = out->first_edge_[st]; k < out->first_edge_[st + 1]; ++k) {
      const Edge& e = out->edges_[k];
      if (e.to != static_cast<int32_t>(st)) continue;
      for (uint32_t c = e.lo; c <= std::min<uint32_t>(e.hi, 127); ++c) stay.set(c);
      if (e.hi >= 0x80) beyond += e.hi - std::max<uint32_t>(e.lo, 0x80) + 1;
    }
    // Every code point past ASCII but the surrogates.
    if (beyond == (kMaxCodePoint - 0x80 + 1) - 0x800) {
      out->loops_[st] = 1;
      out->leave_[st] = ~stay;
    }
  }

  if (lengths) {
    const size_t m = out->accepting_.size();
    // Without a cycle no path is longer than the states, so lengths below the cap are all there are.
    if (m > kLengthCap) fail("the pattern '{}' is too large to combine with minLength / maxLength", pattern);
    std::vector<std::vector<int32_t>> back(m);
    std::vector<uint32_t> out_degree(m, 0);
    for (size_t s = 0; s < m; ++s)
      for (uint32_t k = out->first_edge_[s]; k < out->first_edge_[s + 1]; ++k) {
        back[static_cast<size_t>(out->edges_[k].to)].push_back(static_cast<int32_t>(s));
        ++out_degree[s];
      }
    out->lengths_.assign(m, {});
    std::vector<uint8_t> layer(m, 0), next(m, 0);
    for (size_t s = 0; s < m; ++s) layer[s] = out->accepting_[s];
    for (uint32_t len = 0; len < kLengthCap; ++len) {
      bool any = false;
      std::fill(next.begin(), next.end(), 0);
      for (size_t s = 0; s < m; ++s) {
        if (!layer[s]) continue;
        out->lengths_[s].set(len);
        for (int32_t p : back[s]) next[static_cast<size_t>(p)] = 1;
        any = true;
      }
      if (!any) break;
      layer.swap(next);
    }
    // Longer texts exist only through a cycle: the states that can reach one are those left after peeling
    // off, again and again, the states with no way on.
    std::vector<int32_t> sinks;
    for (size_t s = 0; s < m; ++s)
      if (out_degree[s] == 0) sinks.push_back(static_cast<int32_t>(s));
    std::vector<uint8_t> peeled(m, 0);
    while (!sinks.empty()) {
      const int32_t s = sinks.back();
      sinks.pop_back();
      peeled[static_cast<size_t>(s)] = 1;
      for (int32_t p : back[static_cast<size_t>(s)])
        if (--out_degree[static_cast<size_t>(p)] == 0) sinks.push_back(p);
    }
    out->longer_.assign(m, 0);
    for (size_t s = 0; s < m; ++s) out->longer_[s] = peeled[s] ? 0 : 1;
  }
  return out;
}

std::shared_ptr<const TextPattern> TextPattern::text_until(const std::string& end,
                                                           const std::vector<std::string>& forbidden) {
  // Aho-Corasick over the words: a state is the longest end of the text that starts a word. Reaching the end
  // of `end` accepts (and nothing follows); reaching the end of a forbidden word is a dead end.
  std::vector<std::string> words = {end};
  words.insert(words.end(), forbidden.begin(), forbidden.end());
  for (const std::string& w : words) {
    if (w.empty()) fail("an empty word to end or avoid text at");
    for (char c : w)
      if (static_cast<unsigned char>(c) >= 0x80) fail("the words to end or avoid text at must be ASCII");
  }
  std::vector<std::array<int32_t, 128>> go(1);
  go[0].fill(-1);
  std::vector<uint8_t> ends(1, 0);  // 1: completes `end`, 2: completes a forbidden word
  for (size_t k = 0; k < words.size(); ++k) {
    int32_t node = 0;
    for (char c : words[k]) {
      int32_t next = go[static_cast<size_t>(node)][static_cast<size_t>(c)];
      if (next < 0) {
        next = static_cast<int32_t>(go.size());
        go[static_cast<size_t>(node)][static_cast<size_t>(c)] = next;  // before the table grows
        go.emplace_back();
        go.back().fill(-1);
        ends.push_back(0);
      }
      node = next;
    }
    ends[static_cast<size_t>(node)] = std::max<uint8_t>(ends[static_cast<size_t>(node)], k == 0 ? 1 : 2);
  }
  // Breadth first: each node's failure link is set before its children need it.
  std::vector<int32_t> link(go.size(), 0), order = {0};
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t u = order[i];
    for (size_t c = 0; c < 128; ++c) {
      int32_t& v = go[static_cast<size_t>(u)][c];
      if (v < 0) {
        v = u == 0 ? 0 : go[static_cast<size_t>(link[static_cast<size_t>(u)])][c];
        continue;
      }
      link[static_cast<size_t>(v)] = u == 0 ? 0 : go[static_cast<size_t>(link[static_cast<size_t>(u)])][c];
      // A node that ends a word somewhere in it (through its link) ends it too; a forbidden word wins.
      ends[static_cast<size_t>(v)] =
          std::max(ends[static_cast<size_t>(v)], ends[static_cast<size_t>(link[static_cast<size_t>(v)])]);
      order.push_back(v);
    }
  }
  std::vector<RawState> states(go.size());
  for (size_t u = 0; u < go.size(); ++u) {
    states[u].accepting = ends[u] == 1;
    if (ends[u] != 0) continue;  // the text ended, or may not go on
    std::vector<Edge>& edges = states[u].edges;
    for (uint32_t c = 0; c < 128; ++c) {
      const int32_t to = go[u][c];
      if (ends[static_cast<size_t>(to)] == 2) continue;
      if (!edges.empty() && edges.back().to == to && edges.back().hi + 1 == c) {
        edges.back().hi = c;
      } else {
        edges.push_back({c, c, to});
      }
    }
    // Characters beyond ASCII are in no word: the search starts over.
    edges.push_back({0x80, 0xD7FF, 0});
    edges.push_back({0xE000, kMaxCodePoint, 0});
  }
  return from_states(std::move(states), end, /*lengths=*/false);
}

int32_t TextPattern::next(int32_t state, uint32_t cp) const {
  const auto begin = edges_.begin() + first_edge_[static_cast<size_t>(state)];
  const auto end = edges_.begin() + first_edge_[static_cast<size_t>(state) + 1];
  const auto it = std::upper_bound(begin, end, cp, [](uint32_t v, const Edge& e) { return v < e.lo; });
  if (it == begin) return -1;
  const Edge& e = *(it - 1);
  return cp <= e.hi ? e.to : -1;
}

bool TextPattern::can_finish(int32_t state, uint32_t at_least, uint32_t at_most) const {
  if (lengths_.empty()) return true;  // every kept state can finish; there are no bounds to meet
  const auto s = static_cast<size_t>(state);
  if (at_most == UINT32_MAX) {
    if (longer_[s]) return true;
    if (at_least >= kLengthCap) return false;
    return (lengths_[s] >> at_least).any();
  }
  if (at_least > at_most || at_least >= kLengthCap) return false;
  const uint32_t top = std::min(at_most, kLengthCap - 1);
  return ((lengths_[s] >> at_least) << (kLengthCap - 1 - (top - at_least))).any();
}

bool TextPattern::can_take(int32_t state, uint32_t lo, uint32_t hi, uint32_t at_least, uint32_t at_most) const {
  for (uint32_t k = first_edge_[static_cast<size_t>(state)]; k < first_edge_[static_cast<size_t>(state) + 1]; ++k) {
    const Edge& e = edges_[k];
    if (e.hi < lo) continue;
    if (e.lo > hi) break;
    if (can_finish(e.to, at_least, at_most)) return true;
  }
  return false;
}

}  // namespace kvserve
