#include "engine/grammar_matcher.h"

#include <algorithm>
#include <bitset>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace kvserve {

namespace {

using Frame = GrammarMatcher::Frame;
using Kind = GrammarNode::Kind;

constexpr int kEnd = 256;             // "the text ends here", fed like a byte
constexpr uint8_t kMaxWhitespace = 16;  // in a row: a model cannot pad a value forever
constexpr size_t kMaxDepth = 64;
// Numbers every JSON reader takes as they are: integers within int64 (18 digits), exponents of two digits.
constexpr uint32_t kMaxNumberBytes = 32;
constexpr uint32_t kMaxIntegerDigits = 18;
constexpr uint16_t kMaxExponentDigits = 2;
constexpr int32_t kFreeKey = -2;

// Frame states.
enum : uint8_t {
  kObjOpen,
  kObjKey,
  kObjFreeKey,
  kObjColon,
  kObjValue,
  kObjValueRunning,
  kObjAfter,
  kObjComma,  // object
  kArrOpen,
  kArrRunning,
  kArrAfter,
  kArrComma,  // array
  kStrChars,
  kStrEscape,
  kStrHex,  // string
  kNumStart,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumE,
  kNumESign,
  kNumExp,  // number
  kLiteral,
  kSeq,
  kSeqRunning,
  kBranch,
  kUntil,
  kUntilWs,
  kRegex,
};

enum class Step { Consumed, Done, Retry, Reject };  // Done: consumed and complete; Retry: complete, c is the parent's

bool is_ws(int c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(int c) { return c >= '0' && c <= '9'; }
bool is_hex(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// A UTF-8 lead byte: how many continuation bytes follow (f.sub) and the range of the next one (f.set: low
// byte, high byte), per Unicode's table 3-7 (no overlongs, no surrogates, nothing past U+10FFFF). False for
// a byte no character starts with.
bool utf8_lead(int c, GrammarMatcher::Frame& f) {
  if (c >= 0xC2 && c <= 0xDF) {
    f.sub = 1, f.set = 0xBF80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    f.sub = 2, f.set = c == 0xE0 ? 0xBFA0 : c == 0xED ? 0x9F80 : 0xBF80;
  } else if (c >= 0xF0 && c <= 0xF4) {
    f.sub = 3, f.set = c == 0xF0 ? 0xBF90 : c == 0xF4 ? 0x8F80 : 0xBF80;
  } else {
    return false;
  }
  return true;
}

// The stack as a trial sees it: the committed frames below `base_n`, untouched, and the frames this trial
// changed or pushed above them (a token rarely touches more than the top two).
class Overlay {
 public:
  explicit Overlay(const std::vector<Frame>& base) : base_(base.data()), base_n_(base.size()) {}
  // Copies only the frames in use: a trie walk copies the view once per node it visits.
  Overlay(const Overlay& o) : base_(o.base_), base_n_(o.base_n_), local_n_(o.local_n_) {
    for (size_t i = 0; i < local_n_; ++i) local_[i].f = o.local_[i].f;
  }
  Overlay& operator=(const Overlay&) = delete;
  bool empty() const { return local_n_ == 0 && base_n_ == 0; }
  size_t depth() const { return base_n_ + local_n_; }
  Frame& top() {
    if (local_n_ == 0) {
      local_[0].f = base_[base_n_ - 1];
      --base_n_;
      local_n_ = 1;
    }
    return local_[local_n_ - 1].f;
  }
  bool push(const Frame& f) {
    if (depth() >= kMaxDepth || local_n_ == kLocal) return false;
    local_[local_n_++].f = f;
    return true;
  }
  void pop() {
    if (local_n_ > 0) {
      --local_n_;
    } else {
      --base_n_;
    }
  }
  const Frame& frame(size_t i) const { return i < base_n_ ? base_[i] : local_[i - base_n_].f; }
  bool operator==(const Overlay& o) const {
    if (depth() != o.depth()) return false;
    for (size_t i = 0; i < depth(); ++i)
      if (!(frame(i) == o.frame(i))) return false;
    return true;
  }
  // The stack after the trial, into `out` (not the base's own vector).
  void commit(std::vector<Frame>& out) const {
    out.assign(base_, base_ + base_n_);
    for (size_t i = 0; i < local_n_; ++i) out.push_back(local_[i].f);
  }

 private:
  static constexpr size_t kLocal = 16;
  // Left uninitialized until used: a trial starts with none.
  union Slot {
    Slot() {}
    Frame f;
  };
  const Frame* base_;
  size_t base_n_;
  Slot local_[kLocal];
  size_t local_n_ = 0;
};

// Where a union's branches start alike, the walk takes the first and leaves the others here: a copy of the
// view just before the value starts, the branch, and the byte to start it with.
struct Fork {
  Overlay st;
  int32_t node;
  int c;
  int hops;  // unions passed through on the way to this branch (a schema may refer to itself without end)
};
constexpr int kMaxUnionHops = 64;
constexpr int32_t kFeedByte = -3;  // a Fork's node: feed the byte to the view as it is (a pattern ended before it)

class Walker {
 public:
  Walker(const Grammar& g, Overlay& st, std::vector<Fork>* forks = nullptr) : g_(g), st_(st), forks_(forks) {}

  // Feeds one byte (or kEnd); false when the grammar does not allow it here.
  bool feed(int c) {
    for (;;) {
      if (st_.empty()) return c == kEnd;
      Frame& f = st_.top();
      switch (step(f, c)) {
        case Step::Consumed:
          return true;
        case Step::Reject:
          return false;
        case Step::Done: {
          const Frame ended = f;
          st_.pop();
          complete_parents(ended);
          return true;
        }
        case Step::Retry: {
          const Frame ended = f;
          st_.pop();
          complete_parents(ended);
          continue;
        }
      }
    }
  }

  // Pushes the frame of a value of `node` starting with c, and feeds c to it.
  // A union's other branches for the byte go to forks_ (none kept without one: the first branch only).
  // `taken`: a Literals node's texts it may not be (an array's unique items written already).
  Step start_value(int32_t node, int c, int hops = 0, uint64_t taken = 0) {
    if (c == kEnd || c < 0) return Step::Reject;
    while (node >= 0 && g_.nodes[static_cast<size_t>(node)].kind == Kind::Union) {
      if (++hops > kMaxUnionHops) return Step::Reject;
      int32_t next = g_.dispatch[static_cast<size_t>(node)][static_cast<size_t>(c)];
      if (next <= -2) {
        const std::vector<int32_t>& branches = g_.ambiguous[static_cast<size_t>(-2 - next)];
        if (forks_)
          for (size_t k = 1; k < branches.size(); ++k) forks_->push_back({st_, branches[k], c, hops});
        next = branches[0];
      }
      node = next;
    }
    if (node < 0 && node != kFreeKey) return Step::Reject;
    Frame f;
    f.node = node;
    const Kind kind = node == kFreeKey ? Kind::String : g_.nodes[static_cast<size_t>(node)].kind;
    switch (kind) {
      case Kind::Object:
        if (c != '{') return Step::Reject;
        f.state = kObjOpen;
        return st_.push(f) ? Step::Consumed : Step::Reject;
      case Kind::Array:
        if (c != '[') return Step::Reject;
        f.state = kArrOpen;
        return st_.push(f) ? Step::Consumed : Step::Reject;
      case Kind::String:
        if (c != '"') return Step::Reject;
        f.state = kStrChars;
        if (node >= 0 && g_.nodes[static_cast<size_t>(node)].pattern) {
          const GrammarNode& n = g_.nodes[static_cast<size_t>(node)];
          f.next = n.pattern->start();
          // A pattern's state may be a dead end for the lengths allowed.
          if (!n.pattern->can_finish(f.next, n.min_items, n.max_items)) return Step::Reject;
        }
        return st_.push(f) ? Step::Consumed : Step::Reject;
      case Kind::Number:
      case Kind::Integer:
        f.state = kNumStart;
        break;
      case Kind::Literals:
      case Kind::Branches: {
        const size_t n = g_.nodes[static_cast<size_t>(node)].literals.size();
        f.state = kind == Kind::Literals ? kLiteral : kBranch;
        f.set = n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;  // every text is still a candidate
        f.set &= ~taken;
        if (f.set == 0) return Step::Reject;
        break;
      }
      case Kind::Sequence:
        f.state = kSeq;
        break;
      case Kind::Until:
        f.state = kUntil;
        break;
      case Kind::Regex:
        f.state = kRegex;
        f.next = g_.nodes[static_cast<size_t>(node)].pattern->start();
        break;
      case Kind::Union:
        return Step::Reject;
    }
    if (!st_.push(f)) return Step::Reject;
    const Step s = step(st_.top(), c);
    if (s == Step::Done) {
      const Frame ended = st_.top();
      st_.pop();
      complete_parents(ended);
      return Step::Consumed;
    }
    return s == Step::Retry ? Step::Reject : s;  // a value cannot end before its first byte
  }

 private:
  const GrammarNode& node_of(const Frame& f) const { return g_.nodes[static_cast<size_t>(f.node)]; }

  // A child value ended (`ended`, its frame as it ended): its parent moves on; a sequence whose last part
  // ended ends too. An array of unique items marks the text its item was (and those of an equal value) taken.
  void complete_parents(const Frame& ended) {
    while (!st_.empty()) {
      Frame& p = st_.top();
      switch (p.state) {
        case kObjFreeKey:
          p.state = kObjColon;
          return;
        case kObjValueRunning:
          p.state = kObjAfter;
          ++p.count;
          return;
        case kArrRunning:
          p.state = kArrAfter;
          ++p.count;
          if (const GrammarNode& n = node_of(p); !n.same_value.empty()) {
            const std::vector<std::string>& texts = g_.nodes[static_cast<size_t>(n.items)].literals;
            for (size_t k = 0; k < texts.size(); ++k)
              if ((ended.set >> k & 1) && texts[k].size() == ended.pos) p.set |= n.same_value[k];
          }
          return;
        case kSeqRunning:
          p.state = kSeq;
          ++p.next;
          p.pos = 0;
          if (static_cast<size_t>(p.next) < node_of(p).parts.size()) return;
          st_.pop();
          continue;
        default:
          return;
      }
    }
  }

  // Whitespace where the grammar allows it, bounded.
  static Step whitespace(Frame& f) {
    if (f.ws >= kMaxWhitespace) return Step::Reject;
    ++f.ws;
    return Step::Consumed;
  }

  // Property keys that may come at index `from` after `count` properties: the next ones up to and including
  // the first required, each only where minProperties can still be reached after it and it and the required
  // ones after it fit under maxProperties (an object's min_items / max_items).
  static uint64_t key_candidates(const GrammarNode& n, int32_t from, uint32_t count) {
    uint64_t set = 0;
    const size_t size = n.properties.size();
    for (size_t k = static_cast<size_t>(from); k < size; ++k) {
      uint32_t required_after = 0;
      for (size_t j = k + 1; j < size; ++j) required_after += n.properties[j].required ? 1 : 0;
      const uint64_t with = uint64_t{count} + 1;
      if (with + required_after <= n.max_items && with + (size - k - 1) >= n.min_items) set |= uint64_t{1} << k;
      if (n.properties[k].required) break;
    }
    return set;
  }
  static bool may_close(const GrammarNode& n, int32_t from, uint32_t count) {
    if (count < n.min_items) return false;
    for (size_t k = static_cast<size_t>(from); k < n.properties.size(); ++k)
      if (n.properties[k].required) return false;
    return true;
  }

  Step start_key(Frame& f, const GrammarNode& n) {
    if (n.properties.empty()) {
      if (n.values < 0) return Step::Reject;
      f.state = kObjFreeKey;
      return start_value(kFreeKey, '"');
    }
    f.set = key_candidates(n, f.next, f.count);
    if (f.set == 0) return Step::Reject;
    f.state = kObjKey;
    f.pos = 0;
    return Step::Consumed;
  }

  Step object(Frame& f, int c) {
    const GrammarNode& n = node_of(f);
    switch (f.state) {
      case kObjOpen:
      case kObjComma:
        if (is_ws(c)) return whitespace(f);
        f.ws = 0;
        if (c == '"') return start_key(f, n);
        if (c == '}' && f.state == kObjOpen && may_close(n, 0, 0)) return Step::Done;
        return Step::Reject;
      case kObjKey: {
        if (c == '"') {
          for (size_t k = 0; k < n.properties.size(); ++k)
            if ((f.set >> k & 1) && n.properties[k].key.size() == f.pos) {
              f.sub = static_cast<int32_t>(k);
              f.next = static_cast<int32_t>(k) + 1;
              f.state = kObjColon;
              return Step::Consumed;
            }
          return Step::Reject;
        }
        if (c == kEnd) return Step::Reject;
        uint64_t keep = 0;
        for (size_t k = 0; k < n.properties.size(); ++k)
          if ((f.set >> k & 1) && f.pos < n.properties[k].key.size() &&
              static_cast<unsigned char>(n.properties[k].key[f.pos]) == c)
            keep |= uint64_t{1} << k;
        if (keep == 0) return Step::Reject;
        f.set = keep;
        ++f.pos;
        return Step::Consumed;
      }
      case kObjColon:
        if (is_ws(c)) return whitespace(f);
        if (c != ':') return Step::Reject;
        f.ws = 0;
        f.state = kObjValue;
        return Step::Consumed;
      case kObjValue: {
        if (is_ws(c)) return whitespace(f);
        f.ws = 0;
        f.state = kObjValueRunning;
        const int32_t value = n.properties.empty() ? n.values : n.properties[static_cast<size_t>(f.sub)].node;
        return start_value(value, c);
      }
      case kObjAfter:
        if (is_ws(c)) return whitespace(f);
        f.ws = 0;
        if (c == ',' && (n.properties.empty() ? f.count < n.max_items : key_candidates(n, f.next, f.count) != 0)) {
          f.state = kObjComma;
          return Step::Consumed;
        }
        if (c == '}' && may_close(n, f.next, f.count)) return Step::Done;
        return Step::Reject;
      default:
        return Step::Reject;
    }
  }

  Step array(Frame& f, int c) {
    const GrammarNode& n = node_of(f);
    switch (f.state) {
      case kArrOpen:
      case kArrComma:
        if (is_ws(c)) return whitespace(f);
        f.ws = 0;
        if (c == ']' && f.state == kArrOpen && n.min_items == 0) return Step::Done;
        if (f.count >= n.max_items) return Step::Reject;
        f.state = kArrRunning;
        return start_value(f.count < n.tuple.size() ? n.tuple[f.count] : n.items, c, 0, f.set);
      case kArrAfter:
        if (is_ws(c)) return whitespace(f);
        f.ws = 0;
        if (c == ',' && f.count < n.max_items) {  // (unique items: max_items is at most the distinct values)
          f.state = kArrComma;
          return Step::Consumed;
        }
        if (c == ']' && f.count >= n.min_items) return Step::Done;
        return Step::Reject;
      default:
        return Step::Reject;
    }
  }

  // Lengths still allowed after `count` characters, for a pattern's can_finish.
  static void remaining(const GrammarNode& n, uint32_t count, uint32_t* at_least, uint32_t* at_most) {
    *at_least = n.min_items > count ? n.min_items - count : 0;
    *at_most = n.max_items == UINT32_MAX ? UINT32_MAX : n.max_items - count;
  }

  // A string's next character (code point) under its pattern: one more character, into a state that can
  // still finish within the length bounds.
  static bool pattern_take(Frame& f, const GrammarNode& n, uint32_t cp) {
    if (f.count >= n.max_items) return false;
    const int32_t to = n.pattern->next(f.next, cp);
    if (to < 0) return false;
    uint32_t least = 0, most = 0;
    remaining(n, f.count + 1, &least, &most);
    if (!n.pattern->can_finish(to, least, most)) return false;
    f.next = to;
    ++f.count;
    return true;
  }
  // Whether some code point within [lo, hi] can be the next character.
  static bool pattern_may(const Frame& f, const GrammarNode& n, uint32_t lo, uint32_t hi) {
    if (f.count >= n.max_items) return false;
    uint32_t least = 0, most = 0;
    remaining(n, f.count + 1, &least, &most);
    return n.pattern->can_take(f.next, lo, hi, least, most);
  }
  // The code points a UTF-8 character can still be, after its lead byte and some continuation bytes
  // (f.value the bits so far, f.sub the continuation bytes still due).
  static std::pair<uint32_t, uint32_t> utf8_span(const Frame& f, int total) {
    const auto shift = static_cast<uint32_t>(6 * f.sub);
    const uint32_t lo = static_cast<uint32_t>(f.value) << shift;
    const uint32_t hi = lo | ((1u << shift) - 1);
    const uint32_t floor = total == 2 ? 0x80 : total == 3 ? 0x800 : 0x10000;
    return {std::max(lo, floor), std::min(hi, 0x10FFFFu)};
  }

  // A character of raw UTF-8 text for a pattern (a string's unescaped text, or a Regex node's text):
  // Consumed, or Reject. f.pos: the character's length in bytes.
  Step pattern_utf8(Frame& f, const GrammarNode& n, int c) {
    if (f.sub > 0) {
      if (c < static_cast<int>(f.set & 0xFF) || c > static_cast<int>(f.set >> 8)) return Step::Reject;
      --f.sub;
      f.set = 0xBF80;
      f.value = f.value << 6 | static_cast<uint64_t>(c & 0x3F);
      if (f.sub == 0) return pattern_take(f, n, static_cast<uint32_t>(f.value)) ? Step::Consumed : Step::Reject;
      const auto [lo, hi] = utf8_span(f, f.pos);
      return pattern_may(f, n, lo, hi) ? Step::Consumed : Step::Reject;
    }
    if (c < 0x80) return pattern_take(f, n, static_cast<uint32_t>(c)) ? Step::Consumed : Step::Reject;
    Frame lead = f;
    if (!utf8_lead(c, lead)) return Step::Reject;
    lead.value = static_cast<uint64_t>(c & (0x3F >> lead.sub));
    lead.pos = static_cast<uint16_t>(lead.sub + 1);
    const auto [lo, hi] = utf8_span(lead, lead.pos);
    if (!pattern_may(lead, n, lo, hi)) return Step::Reject;
    f = lead;
    return Step::Consumed;
  }

  // A string whose characters must match a pattern: escapes decoded to the character they stand for.
  Step patterned_string(Frame& f, const GrammarNode& n, int c) {
    if (c == kEnd) return Step::Reject;
    switch (f.state) {
      case kStrChars:
        if (f.sub > 0) return pattern_utf8(f, n, c);
        if (c == '"') return f.count >= n.min_items && n.pattern->accepting(f.next) ? Step::Done : Step::Reject;
        if (c < 0x20) return Step::Reject;
        if (c == '\\') {
          // Any character of the Basic Multilingual Plane can be written escaped.
          if (!pattern_may(f, n, 0, 0xFFFF)) return Step::Reject;
          f.state = kStrEscape;
          return Step::Consumed;
        }
        return pattern_utf8(f, n, c);
      case kStrEscape: {
        if (c == 'u') {
          if (!pattern_may(f, n, 0, 0xFFFF)) return Step::Reject;
          f.state = kStrHex;
          f.sub = 4;
          f.value = 0;
          return Step::Consumed;
        }
        const int cp = c == '"'    ? '"'
                       : c == '\\' ? '\\'
                       : c == '/'  ? '/'
                       : c == 'b'  ? '\b'
                       : c == 'f'  ? '\f'
                       : c == 'n'  ? '\n'
                       : c == 'r'  ? '\r'
                       : c == 't'  ? '\t'
                                   : -1;
        if (cp < 0 || !pattern_take(f, n, static_cast<uint32_t>(cp))) return Step::Reject;
        f.state = kStrChars;
        return Step::Consumed;
      }
      case kStrHex: {
        if (!is_hex(c)) return Step::Reject;
        const int d = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
        f.value = f.value << 4 | static_cast<uint64_t>(d);
        --f.sub;
        const auto shift = static_cast<uint32_t>(4 * f.sub);
        const auto lo = static_cast<uint32_t>(f.value) << shift, hi = lo | ((1u << shift) - 1);
        if (f.sub > 0) return pattern_may(f, n, lo, hi) ? Step::Consumed : Step::Reject;
        // A surrogate's pair is not followed: the pattern has no surrogates, so next() refuses it.
        f.sub = 0;
        f.state = kStrChars;
        return pattern_take(f, n, lo) ? Step::Consumed : Step::Reject;
      }
      default:
        return Step::Reject;
    }
  }

  // Raw text matching a pattern whole; where the pattern cannot take a byte but has matched, the text ends.
  // Where it can take it and has matched, the text may also end there, with the byte the start of what
  // follows: that reading goes to forks_ when what follows can take the byte.
  Step regex(Frame& f, int c) {
    const GrammarNode& n = node_of(f);
    const TextPattern& p = *n.pattern;
    if (f.sub == 0 && p.accepting(f.next)) {
      if (c == kEnd) return Step::Retry;
      Frame trial = f;
      if (pattern_utf8(trial, n, c) == Step::Reject) return Step::Retry;
      if (forks_ && f.count > 0) fork_after(c);
      f = trial;
    } else {
      if (c == kEnd || pattern_utf8(f, n, c) == Step::Reject) return Step::Reject;
    }
    // Nothing can follow a match with no way on: the text is whole.
    return f.sub == 0 && p.accepting(f.next) && !p.has_edges(f.next) ? Step::Done : Step::Consumed;
  }

  Step string(Frame& f, int c) {
    if (f.node != kFreeKey && node_of(f).pattern) return patterned_string(f, node_of(f), c);
    const uint32_t min_len = f.node == kFreeKey ? 0 : node_of(f).min_items;
    const uint32_t max_len = f.node == kFreeKey ? UINT32_MAX : node_of(f).max_items;
    if (c == kEnd) return Step::Reject;
    switch (f.state) {
      case kStrChars:
        // Strict UTF-8 (what JSON readers take): f.sub continuation bytes still due, the next one within
        // [f.set & 0xFF, f.set >> 8] (Unicode's table 3-7: no overlongs, no surrogates, nothing past U+10FFFF).
        if (f.sub > 0) {
          if (c < static_cast<int>(f.set & 0xFF) || c > static_cast<int>(f.set >> 8)) return Step::Reject;
          --f.sub;
          f.set = 0xBF80;
          return Step::Consumed;
        }
        if (c == '"') return f.count >= min_len ? Step::Done : Step::Reject;
        if (c < 0x20) return Step::Reject;
        if (c >= 0x80) {
          if (f.count >= max_len || !utf8_lead(c, f)) return Step::Reject;
          ++f.count;
          return Step::Consumed;
        }
        if (f.count >= max_len) return Step::Reject;
        if (c == '\\') {
          f.state = kStrEscape;
          return Step::Consumed;
        }
        ++f.count;
        return Step::Consumed;
      case kStrEscape:
        if (c == 'u') {
          f.state = kStrHex;
          f.sub = 4;
          return Step::Consumed;
        }
        if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't')
          return Step::Reject;
        ++f.count;
        f.state = kStrChars;
        return Step::Consumed;
      case kStrHex:
        if (!is_hex(c)) return Step::Reject;
        if (--f.sub == 0) {
          ++f.count;
          f.state = kStrChars;
        }
        return Step::Consumed;
      default:
        return Step::Reject;
    }
  }

  // A bounded number's prefix: whether some number it can still become lies within [low, high] and is a
  // multiple of the step (final: the number as it stands). f.set: the integer part; f.value / f.next: the
  // fraction's digits and how many. Each case below is a set of intervals every value of which some
  // continuation writes, so a multiple in one of them is one the reply can still reach.
  static bool within_bounds(const GrammarNode& n, const Frame& f, bool final) {
    const bool integer = n.kind == Kind::Integer;
    const int fraction_digits = integer ? 0 : kBoundedFractionDigits;
    Int128 unit = 1;  // 10^fraction_digits
    for (int k = 0; k < fraction_digits; ++k) unit *= 10;
    const auto whole = static_cast<Int128>(f.set);
    Int128 frac_unit = 1;  // the last fraction digit's worth
    for (int k = f.next; k < fraction_digits; ++k) frac_unit *= 10;
    auto overlaps = [&](Int128 lo, Int128 hi) {  // magnitudes [lo, hi]
      return holds_multiple(std::max(f.sub ? -hi : lo, n.low), std::min(f.sub ? -lo : hi, n.high), n.step);
    };
    const Int128 exact = whole * unit + static_cast<Int128>(f.value) * frac_unit;
    if (final) return overlaps(exact, exact);
    switch (f.state) {
      case kNumMinus: {
        Int128 most = unit;
        for (uint32_t k = 0; k < kMaxIntegerDigits; ++k) most *= 10;
        return overlaps(0, most - 1);
      }
      case kNumZero:
      case kNumDot:
        return overlaps(whole * unit, (whole + 1) * unit - 1);
      case kNumFrac:
        return overlaps(exact, exact + frac_unit - 1);
      case kNumInt: {
        Int128 scale = unit;
        for (uint32_t k = f.pos; k <= kMaxIntegerDigits; ++k, scale *= 10)
          if (overlaps(whole * scale, (whole + 1) * scale - 1)) return true;
        return false;
      }
      default:
        return false;
    }
  }

  Step number(Frame& f, int c) {
    const GrammarNode& n = node_of(f);
    const bool integer = n.kind == Kind::Integer;
    const bool accepting = f.state == kNumZero || f.state == kNumInt || f.state == kNumFrac || f.state == kNumExp;
    // f.count: bytes so far; f.pos: digits of the integer part, then of the exponent.
    auto next = [&](uint8_t state) {
      if (f.count >= kMaxNumberBytes) return Step::Reject;
      if ((state == kNumInt || state == kNumZero) && ++f.pos > kMaxIntegerDigits) return Step::Reject;
      if (state == kNumE) f.pos = 0;
      if (state == kNumExp && ++f.pos > kMaxExponentDigits) return Step::Reject;
      ++f.count;
      f.state = state;
      if (n.bounded) {
        if (state == kNumMinus) f.sub = 1;
        if (state == kNumInt || state == kNumZero) f.set = f.set * 10 + static_cast<uint64_t>(c - '0');
        if (state == kNumFrac) {
          if (++f.next > kBoundedFractionDigits) return Step::Reject;
          f.value = f.value * 10 + static_cast<uint64_t>(c - '0');
        }
        if (!within_bounds(n, f, false)) return Step::Reject;
      }
      return Step::Consumed;
    };
    // Bounded numbers are written without an exponent.
    const bool exponent = !integer && !n.bounded;
    switch (f.state) {
      case kNumStart:
        if (c == '-') return next(kNumMinus);
        [[fallthrough]];
      case kNumMinus:
        if (c == '0') return next(kNumZero);
        if (is_digit(c)) return next(kNumInt);
        return Step::Reject;
      case kNumInt:
        if (is_digit(c)) return next(kNumInt);
        [[fallthrough]];
      case kNumZero:
        if (!integer && c == '.') return next(kNumDot);
        if (exponent && (c == 'e' || c == 'E')) return next(kNumE);
        break;
      case kNumDot:
        return is_digit(c) ? next(kNumFrac) : Step::Reject;
      case kNumFrac:
        if (is_digit(c)) return next(kNumFrac);
        if (exponent && (c == 'e' || c == 'E')) return next(kNumE);
        break;
      case kNumE:
        if (c == '+' || c == '-') return next(kNumESign);
        [[fallthrough]];
      case kNumESign:
        return is_digit(c) ? next(kNumExp) : Step::Reject;
      case kNumExp:
        if (is_digit(c)) return next(kNumExp);
        break;
      default:
        return Step::Reject;
    }
    if (!accepting || (n.bounded && !within_bounds(n, f, true))) return Step::Reject;
    return Step::Retry;
  }

  Step literal(Frame& f, int c) {
    const std::vector<std::string>& lits = node_of(f).literals;
    uint64_t keep = 0, complete = 0;
    bool longer = false;
    for (size_t k = 0; k < lits.size() && k < 64; ++k) {
      if (!(f.set >> k & 1)) continue;
      const std::string& l = lits[k];
      if (l.size() == f.pos) complete |= uint64_t{1} << k;
      if (c != kEnd && f.pos < l.size() && static_cast<unsigned char>(l[f.pos]) == c) {
        keep |= uint64_t{1} << k;
        if (l.size() > static_cast<size_t>(f.pos) + 1) longer = true;
      }
    }
    if (keep == 0) return complete != 0 ? Step::Retry : Step::Reject;
    f.set = keep;
    ++f.pos;
    return longer ? Step::Consumed : Step::Done;
  }

  // A head's text; once one head is whole (none starts another), the frame becomes that head's Sequence.
  Step branch(Frame& f, int c) {
    const GrammarNode& n = node_of(f);
    if (c == kEnd) return Step::Reject;
    uint64_t keep = 0;
    for (size_t k = 0; k < n.literals.size() && k < 64; ++k)
      if ((f.set >> k & 1) && f.pos < n.literals[k].size() && static_cast<unsigned char>(n.literals[k][f.pos]) == c)
        keep |= uint64_t{1} << k;
    if (keep == 0) return Step::Reject;
    f.set = keep;
    ++f.pos;
    for (size_t k = 0; k < n.literals.size() && k < 64; ++k)
      if ((keep >> k & 1) && n.literals[k].size() == f.pos) {
        // A head with nothing after it ends the node.
        if (g_.nodes[static_cast<size_t>(n.alternatives[k])].parts.empty()) return Step::Done;
        Frame rest;
        rest.node = n.alternatives[k];
        rest.state = kSeq;
        f = rest;
        break;
      }
    return Step::Consumed;
  }

  // Free text until the terminator (f.pos: how much of it the text ends with), then whitespace; the first
  // other byte belongs to what follows.
  Step until(Frame& f, int c) {
    const std::string& term = node_of(f).literals[0];
    if (f.state == kUntilWs) {
      if (c != kEnd && is_ws(c)) return whitespace(f);
      return Step::Retry;
    }
    if (c == kEnd) return Step::Reject;
    if (static_cast<unsigned char>(term[f.pos]) == c) {
      if (++f.pos < term.size()) return Step::Consumed;
      f.state = kUntilWs;
      f.ws = 0;
      return Step::Consumed;
    }
    // The longest start of the terminator the text now ends with.
    std::string tail = term.substr(0, f.pos);
    tail.push_back(static_cast<char>(c));
    size_t k = std::min(tail.size(), term.size() - 1);
    while (k > 0 && tail.compare(tail.size() - k, k, term, 0, k) != 0) --k;
    f.pos = static_cast<uint16_t>(k);
    return Step::Consumed;
  }

  [[gnu::noinline]] Step sequence(Frame& f, int c) {
    const GrammarNode& n = node_of(f);
    if (f.state != kSeq || static_cast<size_t>(f.next) >= n.parts.size()) return Step::Reject;
    if (n.parts[static_cast<size_t>(f.next)].optional && !past_optional_parts(f, n, c)) return Step::Retry;
    const GrammarNode::Part& part = n.parts[static_cast<size_t>(f.next)];
    if (part.node >= 0) {
      if (static_cast<size_t>(f.next) + 1 == n.parts.size()) {
        // The last part takes the sequence's place, so a grammar's right recursion (x ::= "a" x | "a")
        // keeps a flat stack.
        const int32_t last = part.node;
        st_.pop();
        return start_value(last, c);
      }
      f.state = kSeqRunning;
      return start_value(part.node, c);
    }
    if (c == kEnd || static_cast<unsigned char>(part.text[f.pos]) != c) return Step::Reject;
    if (++f.pos < part.text.size()) return Step::Consumed;
    ++f.next;
    f.pos = 0;
    return static_cast<size_t>(f.next) < n.parts.size() ? Step::Consumed : Step::Done;
  }

  // An optional part the byte cannot start is passed over; false where every part left is (the sequence ends:
  // the byte is the parent's). Where the byte can start one, the reading that passes over it goes to forks_.
  // Out of line: only GBNF grammars have optional parts, and the JSON ones' steps stay small.
  [[gnu::noinline]] bool past_optional_parts(Frame& f, const GrammarNode& n, int c) {
    while (n.parts[static_cast<size_t>(f.next)].optional) {
      const int32_t node = n.parts[static_cast<size_t>(f.next)].node;
      if (c != kEnd && g_.firsts[static_cast<size_t>(node)].test(static_cast<size_t>(c))) {
        if (forks_) {
          Overlay past(st_);
          Frame& top = past.top();
          ++top.next;
          top.pos = 0;
          if (static_cast<size_t>(top.next) == n.parts.size()) {
            const Frame ended = past.top();
            past.pop();
            Walker(g_, past).complete_parents(ended);
          }
          fork_feeding(past, c);
        }
        return true;
      }
      ++f.next;
      f.pos = 0;
      if (static_cast<size_t>(f.next) == n.parts.size()) return false;
    }
    return true;
  }

  Step step(Frame& f, int c) {
    if (f.node == kFreeKey) return string(f, c);
    switch (node_of(f).kind) {
      case Kind::Object:
        return c == kEnd ? Step::Reject : object(f, c);
      case Kind::Array:
        return c == kEnd ? Step::Reject : array(f, c);
      case Kind::String:
        return string(f, c);
      case Kind::Number:
      case Kind::Integer:
        return number(f, c);
      case Kind::Literals:
        return literal(f, c);
      case Kind::Sequence:
        return sequence(f, c);
      case Kind::Branches:
        return branch(f, c);
      case Kind::Until:
        return until(f, c);
      case Kind::Regex:
        return regex(f, c);
      case Kind::Union:
        break;
    }
    return Step::Reject;
  }

  // The reading where the top value ends before `c`: kept as a fork that feeds c to what follows, if that
  // takes it (most bytes it does not, and then no fork is made).
  [[gnu::noinline]] void fork_after(int c) {
    Overlay after(st_);
    const Frame ended = after.top();
    after.pop();
    Walker(g_, after).complete_parents(ended);
    fork_feeding(after, c);
  }

  // A reading `view` that is to take c next: kept, if it can.
  [[gnu::noinline]] void fork_feeding(const Overlay& view, int c) {
    Overlay probe(view);
    std::vector<Fork> probe_forks;
    Walker w(g_, probe, &probe_forks);
    if (w.feed(c) || !probe_forks.empty()) forks_->push_back({view, kFeedByte, c, 0});
  }

  const Grammar& g_;
  Overlay& st_;
  std::vector<Fork>* forks_;
};

// Strict UTF-8 from a character boundary, as the string state checks it; the last character may be cut.
bool valid_utf8(const std::string& s) {
  Frame f;
  f.state = kStrChars;
  for (unsigned char c : s) {
    if (f.sub > 0) {
      if (c < (f.set & 0xFF) || c > (f.set >> 8)) return false;
      --f.sub;
      f.set = 0xBF80;
    } else if (c >= 0x80 && !utf8_lead(c, f)) {
      return false;
    }
  }
  return true;
}

}  // namespace

GrammarTokenTable::GrammarTokenTable(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.n_vocab();
  bytes_.resize(static_cast<size_t>(n));
  plain_.assign(static_cast<size_t>(n), 0);
  raw_.assign(static_cast<size_t>(n), 0);
  eog_.assign(static_cast<size_t>(n), 0);
  first_byte_.assign(static_cast<size_t>(n), 0);
  text_.assign(static_cast<size_t>(n), 0);
  for (int32_t id = 0; id < n; ++id) {
    std::string b = tokenizer.token_to_piece(id, /*special=*/false);
    // A token may end inside a character (byte-level BPE splits them): the string state carries it on.
    const bool raw = !b.empty() && !tokenizer.is_eog(id) && valid_utf8(b);
    bool plain = raw;
    for (unsigned char c : b)
      if (c == '"' || c == '\\' || c < 0x20) plain = false;
    plain_[static_cast<size_t>(id)] = plain ? 1 : 0;
    raw_[static_cast<size_t>(id)] = raw ? 1 : 0;
    if (!plain && !b.empty() && !tokenizer.is_eog(id)) unplain_.push_back(id);
    if (!raw && !b.empty() && !tokenizer.is_eog(id)) unraw_.push_back(id);
    if (tokenizer.is_eog(id)) eog_ids_.push_back(id);
    text_[static_cast<size_t>(id)] = !b.empty() && !tokenizer.is_eog(id);
    first_byte_[static_cast<size_t>(id)] = b.empty() ? 0 : static_cast<unsigned char>(b[0]);
    eog_[static_cast<size_t>(id)] = tokenizer.is_eog(id) ? 1 : 0;
    bytes_[static_cast<size_t>(id)] = std::move(b);
  }
  // The trie, built from the tokens in byte order: a new token's path shares the previous one's prefix, so
  // the child to follow is always a node's last child.
  std::vector<int32_t> order;
  for (int32_t id = 0; id < n; ++id)
    if (!bytes_[static_cast<size_t>(id)].empty() && !eog_[static_cast<size_t>(id)]) order.push_back(id);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)]; });
  trie_.assign(1, TrieNode{});
  std::vector<uint32_t> last_child(1, 0);
  same_bytes_next_.assign(static_cast<size_t>(n), -1);
  for (int32_t id : order) {
    uint32_t node = 0;
    for (unsigned char c : bytes_[static_cast<size_t>(id)]) {
      const uint32_t last = last_child[node];
      if (last != 0 && trie_[last].byte == c) {
        node = last;
        continue;
      }
      TrieNode child;
      child.byte = c;
      trie_.push_back(child);
      last_child.push_back(0);
      const auto added = static_cast<uint32_t>(trie_.size() - 1);
      if (last == 0) {
        trie_[node].first_child = added;
      } else {
        trie_[last].next_sibling = added;
      }
      last_child[node] = added;
      node = added;
    }
    same_bytes_next_[static_cast<size_t>(id)] = trie_[node].token;
    trie_[node].token = id;
  }
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, const GrammarTokenTable& table,
                               const std::vector<std::pair<int32_t, std::string>>& shown)
    : grammar_(std::move(grammar)), table_(table), shown_(shown) {
  if (!grammar_ || grammar_->root < 0) fail("an empty grammar");
  // The compilers give every grammar a Sequence root (json_grammar.cpp), whose first part takes the first byte.
  Frame root;
  root.node = grammar_->root;
  if (grammar_->nodes[static_cast<size_t>(root.node)].kind != GrammarNode::Kind::Sequence)
    fail("a grammar's root must be a sequence");
  root.state = kSeq;
  stacks_.push_back({root});
  // An empty reply is a reading of its own: a stack with nothing left, which takes only the end.
  if (grammar_->may_be_empty) stacks_.emplace_back();
}

const std::string& GrammarMatcher::token_bytes(int32_t id) const {
  for (const auto& [shown_id, text] : shown_)
    if (shown_id == id) return text;
  return table_.bytes(id);
}

namespace {

// Adds a view unless an equal one is there (readings that met again) or there are enough.
void add_view(std::vector<Overlay>& views, const Overlay& v) {
  if (views.size() >= GrammarMatcher::kMaxStacks) return;
  for (const Overlay& o : views)
    if (o == v) return;
  views.push_back(v);
}

// A fork's branch starts with its byte; the view that comes of it, and of the forks it makes, go to `out`.
void resume(const Grammar& g, Fork& fk, std::vector<Overlay>& out) {
  std::vector<Fork> forks;
  Walker w(g, fk.st, &forks);
  const bool ok = fk.node == kFeedByte ? w.feed(fk.c) : w.start_value(fk.node, fk.c, fk.hops) == Step::Consumed;
  if (ok) add_view(out, fk.st);
  for (Fork& f : forks) resume(g, f, out);
}

// One byte fed to each view in turn: the views that take it, and the readings their forks make, go to `out`
// in that order. The mask and accept both read text through this, byte by byte, so they keep the same
// readings where there are more than kMaxStacks.
void step_views(const Grammar& g, const std::vector<Overlay>& in, unsigned char byte, std::vector<Overlay>& out) {
  for (const Overlay& v : in) {
    Overlay st(v);
    std::vector<Fork> forks;
    Walker w(g, st, &forks);
    if (w.feed(byte)) add_view(out, st);
    for (Fork& f : forks) resume(g, f, out);
  }
}

}  // namespace

bool GrammarMatcher::feed_token(const std::string& bytes, std::vector<std::vector<Frame>>* commit) const {
  // One reading that never forks: the common case, without copies of views.
  if (stacks_.size() == 1) {
    Overlay st(stacks_[0]);
    std::vector<Fork> forks;
    Walker w(*grammar_, st, &forks);
    bool ok = true;
    for (size_t k = 0; k < bytes.size() && ok && forks.empty(); ++k) ok = w.feed(static_cast<unsigned char>(bytes[k]));
    if (forks.empty()) {
      if (ok && commit) {
        commit->assign(1, {});
        st.commit((*commit)[0]);
      }
      return ok;
    }
  }
  std::vector<Overlay> views, next;
  for (const std::vector<Frame>& stack : stacks_) views.emplace_back(stack);
  for (unsigned char c : bytes) {
    next.clear();
    step_views(*grammar_, views, c, next);
    if (next.empty()) return false;
    views.swap(next);
  }
  if (commit) {
    commit->assign(views.size(), {});
    for (size_t k = 0; k < views.size(); ++k) views[k].commit((*commit)[k]);
  }
  return true;
}

bool GrammarMatcher::can_end() const {
  for (const std::vector<Frame>& stack : stacks_) {
    Overlay st(stack);
    Walker w(*grammar_, st);
    if (w.feed(kEnd)) return true;
  }
  return false;
}

bool GrammarMatcher::done() const {
  for (const std::vector<Frame>& stack : stacks_)
    if (!stack.empty()) return false;
  return true;
}

bool GrammarMatcher::accept(int32_t id) {
  if (id < 0 || id >= table_.size()) return false;
  if (table_.end_of_generation(id)) return can_end();
  const std::string& bytes = token_bytes(id);
  if (bytes.empty()) return false;
  std::vector<std::vector<Frame>> next;
  if (!feed_token(bytes, &next)) return false;
  stacks_ = std::move(next);
  return true;
}

const std::vector<int32_t>& GrammarTokenTable::tokens_containing(uint8_t byte) const {
  std::call_once(containing_once_[byte], [&] {
    for (int32_t id = 0; id < size(); ++id)
      if (text_[static_cast<size_t>(id)] &&
          bytes_[static_cast<size_t>(id)].find(static_cast<char>(byte)) != std::string::npos)
        containing_[byte].push_back(id);
  });
  return containing_[byte];
}

namespace {

void mark_views(const Grammar& g, const GrammarTokenTable& table, uint32_t node, const std::vector<Overlay>& views,
                std::vector<uint8_t>& allowed);

// Marks every token in the subtree under `node` whose bytes the grammar takes from the state `st`.
void mark_subtree(const Grammar& g, const GrammarTokenTable& table, uint32_t node, const Overlay& st,
                  std::vector<uint8_t>& allowed);

// The trie node `c` (a child of the node `st` stands at) and the tokens below it.
void mark_child(const Grammar& g, const GrammarTokenTable& table, uint32_t c, const Overlay& st,
                std::vector<uint8_t>& allowed) {
  const std::vector<GrammarTokenTable::TrieNode>& trie = table.trie();
  Overlay next(st);
  std::vector<Fork> forks;
  Walker w(g, next, &forks);
  const bool ok = w.feed(trie[c].byte);
  if (!forks.empty()) {
    // A union's branches start alike here: the subtree is walked with every reading.
    std::vector<Overlay> views;
    step_views(g, {st}, trie[c].byte, views);
    if (views.empty()) return;
    for (int32_t t = trie[c].token; t >= 0; t = table.same_bytes_next(t)) allowed[static_cast<size_t>(t)] = 1;
    if (trie[c].first_child != 0) mark_views(g, table, c, views, allowed);
    return;
  }
  if (!ok) return;  // nothing below this prefix can come
  for (int32_t t = trie[c].token; t >= 0; t = table.same_bytes_next(t)) allowed[static_cast<size_t>(t)] = 1;
  if (trie[c].first_child != 0) mark_subtree(g, table, c, next, allowed);
}

// Marks every token in the subtree under `node` whose bytes the grammar takes from the state `st`.
void mark_subtree(const Grammar& g, const GrammarTokenTable& table, uint32_t node, const Overlay& st,
                  std::vector<uint8_t>& allowed) {
  const std::vector<GrammarTokenTable::TrieNode>& trie = table.trie();
  for (uint32_t c = trie[node].first_child; c != 0; c = trie[c].next_sibling) mark_child(g, table, c, st, allowed);
}

// Inside a string with a pattern (`root`'s top frame, at a character boundary): an ASCII string character
// steps the pattern's automaton alone (its state and the count are all it changes); any other byte is
// walked in full from a view of the stack with the string at that point.
void mark_pattern(const Grammar& g, const GrammarTokenTable& table, uint32_t node, const Overlay& root,
                  const GrammarNode& n, int32_t state, uint32_t count, std::vector<uint8_t>& allowed) {
  const std::vector<GrammarTokenTable::TrieNode>& trie = table.trie();
  for (uint32_t c = trie[node].first_child; c != 0; c = trie[c].next_sibling) {
    const uint8_t b = trie[c].byte;
    if (b >= 0x80 || b < 0x20 || b == '"' || b == '\\') {
      Overlay at(root);
      Frame& f = at.top();
      f.next = state;
      f.count = count;
      mark_child(g, table, c, at, allowed);
      continue;
    }
    // As the string state's pattern_take does it.
    if (count >= n.max_items) continue;
    const int32_t to = n.pattern->next(state, b);
    if (to < 0) continue;
    const uint32_t least = n.min_items > count + 1 ? n.min_items - count - 1 : 0;
    const uint32_t most = n.max_items == UINT32_MAX ? UINT32_MAX : n.max_items - count - 1;
    if (!n.pattern->can_finish(to, least, most)) continue;
    for (int32_t t = trie[c].token; t >= 0; t = table.same_bytes_next(t)) allowed[static_cast<size_t>(t)] = 1;
    if (trie[c].first_child != 0) mark_pattern(g, table, c, root, n, to, count + 1, allowed);
  }
}

// The same, for the text read several ways at once.
void mark_views(const Grammar& g, const GrammarTokenTable& table, uint32_t node, const std::vector<Overlay>& views,
                std::vector<uint8_t>& allowed) {
  if (views.size() == 1) return mark_subtree(g, table, node, views[0], allowed);
  const std::vector<GrammarTokenTable::TrieNode>& trie = table.trie();
  for (uint32_t c = trie[node].first_child; c != 0; c = trie[c].next_sibling) {
    std::vector<Overlay> next;
    step_views(g, views, trie[c].byte, next);
    if (next.empty()) continue;
    for (int32_t t = trie[c].token; t >= 0; t = table.same_bytes_next(t)) allowed[static_cast<size_t>(t)] = 1;
    if (trie[c].first_child != 0) mark_views(g, table, c, next, allowed);
  }
}

}  // namespace

// Raw text in a state that loops on all but the `leaving` ASCII bytes (one reading): the raw tokens without
// them are text as they are; the rest get a full check. Out of line, so the trie walk's code around it stays
// as compact as before.
void GrammarMatcher::mask_looping_text(const std::bitset<128>& leaving, std::vector<uint8_t>& allowed) const {
  allowed = table_.raw_flags();
  for (int32_t id : table_.unraw()) allowed[static_cast<size_t>(id)] = feed_token(table_.bytes(id), nullptr);
  // A raw token stays in the state up to its first leaving byte, and where the state cannot end the text
  // (no reading forks off before that byte), the token's fate starts there: a leaving byte the state refuses
  // refuses every token it comes first in, without a walk (a newline inside a JSON string).
  const std::vector<Frame>& stack = stacks_[0];
  const Frame& top = stack.back();
  const bool stays = !grammar_->nodes[static_cast<size_t>(top.node)].pattern->accepting(top.next);
  std::bitset<128> refused;
  if (stays)
    for (size_t b = 0; b < 128; ++b)
      if (leaving.test(b)) {
        Overlay st(stack);
        std::vector<Fork> forks;
        Walker w(*grammar_, st, &forks);
        refused[b] = !w.feed(static_cast<int>(b)) && forks.empty();
      }
  for (size_t b = 0; b < 128; ++b) {
    if (!leaving.test(b)) continue;
    for (int32_t id : table_.tokens_containing(static_cast<uint8_t>(b))) {
      // The tokens that are not raw text had their full check above.
      if (!allowed[static_cast<size_t>(id)] || !table_.raw_flags()[static_cast<size_t>(id)]) continue;
      // Each token is checked once, in the list of its first leaving byte.
      const std::string& bytes = table_.bytes(id);
      size_t first = 0;
      while (first < bytes.size() && !(static_cast<unsigned char>(bytes[first]) < 128 &&
                                       leaving.test(static_cast<unsigned char>(bytes[first]))))
        ++first;
      if (static_cast<unsigned char>(bytes[first]) != b) continue;
      allowed[static_cast<size_t>(id)] = !(stays && refused[b]) && feed_token(bytes, nullptr);
    }
  }
}

int64_t GrammarMatcher::mask(float* logits, int32_t n_vocab) const {
  constexpr float kNo = -std::numeric_limits<float>::infinity();
  const bool end_ok = can_end();
  const int32_t n = std::min(n_vocab, table_.size());
  thread_local std::vector<uint8_t> allowed;
  allowed.assign(static_cast<size_t>(table_.size()), 0);
  // Inside a string with no length bound, a token of plain text is string text whatever its bytes: only
  // the others need a check. Elsewhere the trie walk visits only prefixes the grammar takes.
  // Both shortcuts read a single stack; text read several ways takes the trie walk.
  const std::vector<Frame>& stack = stacks_[0];
  const bool single = stacks_.size() == 1;
  bool free_string = false;
  if (single && !stack.empty()) {
    const Frame& top = stack.back();
    if (top.state == kStrChars && top.sub == 0)
      free_string = top.node == kFreeKey || (grammar_->nodes[static_cast<size_t>(top.node)].max_items == UINT32_MAX &&
                                             !grammar_->nodes[static_cast<size_t>(top.node)].pattern);
  }
  // Inside free text before its terminator: any token with text, except that one holding the terminator's
  // last byte may complete it, and what follows must then fit: those are checked in full.
  const bool free_text = single && !stack.empty() && stack.back().state == kUntil;
  // Inside raw text whose pattern state stays put on all but a few ASCII bytes (a tool call's free-text
  // value before any '<'): the plain tokens without those bytes are text as they are; the rest get a full check.
  const std::bitset<128>* leaving = nullptr;
  if (single && !stack.empty() && stack.back().state == kRegex && stack.back().sub == 0)
    leaving = grammar_->nodes[static_cast<size_t>(stack.back().node)].pattern->leaves_on(stack.back().next);
  if (leaving && !free_text) {
    mask_looping_text(*leaving, allowed);
  } else if (free_text) {
    allowed = table_.text_flags();
    const std::string& term = grammar_->nodes[static_cast<size_t>(stack.back().node)].literals[0];
    for (int32_t id : table_.tokens_containing(static_cast<unsigned char>(term.back())))
      allowed[static_cast<size_t>(id)] = feed_token(table_.bytes(id), nullptr);
  } else if (free_string) {
    std::bitset<256> first;
    for (int b = 0; b < 256; ++b) {
      Overlay st(stack);
      Walker w(*grammar_, st);
      first[static_cast<size_t>(b)] = w.feed(b);
    }
    allowed = table_.plain_flags();
    for (int32_t id : table_.unplain())
      if (first[table_.first_byte(id)]) {
        const std::string& b = table_.bytes(id);
        allowed[static_cast<size_t>(id)] = b.size() == 1 || feed_token(b, nullptr);
      }
  } else if (single && !stack.empty() && stack.back().state == kStrChars && stack.back().sub == 0 &&
             stack.back().node != kFreeKey && grammar_->nodes[static_cast<size_t>(stack.back().node)].pattern) {
    const Frame& top = stack.back();
    const GrammarNode& n = grammar_->nodes[static_cast<size_t>(top.node)];
    if (n.min_items == 0 && n.max_items == UINT32_MAX) {
      // Without length bounds, the plain tokens that stay inside the string depend on the pattern's state
      // alone: worked out once per state, and the others checked in full each time.
      const std::pair<int32_t, int32_t> key(top.node, top.next);
      std::shared_ptr<const std::vector<uint8_t>> inside;
      {
        const std::lock_guard<std::mutex> lock(pattern_cache_->mu);
        if (auto it = pattern_cache_->inside.find(key); it != pattern_cache_->inside.end()) inside = it->second;
      }
      if (!inside) {
        std::vector<uint8_t> set(static_cast<size_t>(table_.size()), 0);
        mark_pattern(*grammar_, table_, 0, Overlay(stack), n, top.next, top.count, set);
        const std::vector<uint8_t>& plain = table_.plain_flags();
        for (size_t id = 0; id < set.size(); ++id) set[id] &= plain[id];
        auto made = std::make_shared<const std::vector<uint8_t>>(std::move(set));
        const std::lock_guard<std::mutex> lock(pattern_cache_->mu);
        inside = pattern_cache_->inside.emplace(key, std::move(made)).first->second;
      }
      allowed = *inside;
      for (int32_t id : table_.unplain()) allowed[static_cast<size_t>(id)] = feed_token(table_.bytes(id), nullptr);
    } else {
      mark_pattern(*grammar_, table_, 0, Overlay(stack), n, top.next, top.count, allowed);
    }
  } else {
    std::vector<Overlay> roots;
    for (const std::vector<Frame>& s : stacks_) roots.emplace_back(s);
    mark_views(*grammar_, table_, 0, roots, allowed);
  }
  for (const auto& [id, text] : shown_)
    if (id >= 0 && id < n) allowed[static_cast<size_t>(id)] = !text.empty() && feed_token(text, nullptr);
  for (int32_t id : table_.end_of_generation_ids()) allowed[static_cast<size_t>(id)] = end_ok ? 1 : 0;
  // Branch-free, so it vectorizes: this pass and the sampler's are the two that touch every logit.
  int64_t count = 0;
  for (int32_t id = 0; id < n; ++id) {
    const uint8_t ok = allowed[static_cast<size_t>(id)];
    logits[id] = ok ? logits[id] : kNo;
    count += ok;
  }
  for (int32_t id = n; id < n_vocab; ++id) logits[id] = kNo;
  return count;
}

}  // namespace kvserve
